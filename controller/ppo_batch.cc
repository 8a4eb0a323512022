// PpoAlgorithm's batch assembly, shared by the synchronous loop and PpoPipeline:
// worker rollout -> rewards scaled by its slot's normaliser -> GAE -> valid samples appended
// to the iteration's TrainBatch -> train_step request -> the iteration's record.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/timing_keys.h"
#include "controller/ppo_algorithm.h"
#include "trainer/gae.h"

namespace rlforge {

namespace {

const TensorFrame* Find(const WorkOutcome& o, const std::string& name) {
  for (const auto& t : o.tensors) {
    if (t.name() == name) return &t;
  }
  return nullptr;
}

absl::StatusOr<const TensorFrame*> Need(const WorkOutcome& o, const std::string& name, DType dtype,
                                        int64_t numel) {
  const TensorFrame* t = Find(o, name);
  if (t == nullptr || t->dtype() != dtype || t->numel() != numel) {
    return absl::DataLossError(absl::StrCat(o.actor_id, " sent a rollout without a valid '", name,
                                            "' tensor (", DTypeName(dtype), ", ", numel,
                                            " values)"));
  }
  return t;
}

}  // namespace

absl::StatusOr<std::vector<float>> PpoAlgorithm::ScaledRewards(const WorkOutcome& o,
                                                               size_t producer) {
  const int64_t TN = config_.rollout.steps_per_iteration * config_.env.num_envs;
  ASSIGN_OR_RETURN(const TensorFrame* t_rew, Need(o, "rewards", proto::F32, TN));
  ASSIGN_OR_RETURN(const TensorFrame* t_term, Need(o, "terminated", proto::U8, TN));
  ASSIGN_OR_RETURN(const TensorFrame* t_trunc, Need(o, "truncated", proto::U8, TN));
  ASSIGN_OR_RETURN(const TensorFrame* t_valid, Need(o, "valid", proto::U8, TN));
  std::vector<float> scaled(t_rew->data_as<float>(), t_rew->data_as<float>() + TN);
  if (config_.ppo.normalize_reward) {
    const auto* term = static_cast<const uint8_t*>(t_term->data());
    const auto* trunc = static_cast<const uint8_t*>(t_trunc->data());
    std::vector<uint8_t> done(TN);
    for (int64_t i = 0; i < TN; ++i) done[i] = term[i] | trunc[i];
    reward_scalers_[producer].ScaleInPlace(config_.rollout.steps_per_iteration, scaled.data(),
                                           done.data(),
                                           static_cast<const uint8_t*>(t_valid->data()));
  }
  return scaled;
}

absl::Status PpoAlgorithm::AddRollout(const WorkOutcome& o, const std::vector<float>& rewards,
                                      size_t producer, int64_t version, TrainBatch* b,
                                      Progress* p) {
  const int64_t T = config_.rollout.steps_per_iteration, N = config_.env.num_envs;
  const int64_t O = spec_.obs_size(), A = spec_.discrete() ? 1 : spec_.action_size();
  const int64_t lag = version - o.result.policy_version();
  b->lag = std::max(b->lag, lag);
  ++b->units_by_slot[producer];
  const auto& m = o.result.metrics();
  b->policy_s += m.count("policy_s") ? m.at("policy_s") : 0;
  b->env_s += m.count("env_s") ? m.at("env_s") : 0;
  const int64_t TN = T * N;
  ASSIGN_OR_RETURN(const TensorFrame* t_obs, Need(o, "obs", proto::F32, TN * O));
  ASSIGN_OR_RETURN(const TensorFrame* t_act,
                   Need(o, "actions", spec_.discrete() ? proto::I64 : proto::F32, TN * A));
  ASSIGN_OR_RETURN(const TensorFrame* t_logp, Need(o, "logprobs", proto::F32, TN));
  ASSIGN_OR_RETURN(const TensorFrame* t_val, Need(o, "values", proto::F32, TN));
  ASSIGN_OR_RETURN(const TensorFrame* t_term, Need(o, "terminated", proto::U8, TN));
  ASSIGN_OR_RETURN(const TensorFrame* t_trunc, Need(o, "truncated", proto::U8, TN));
  ASSIGN_OR_RETURN(const TensorFrame* t_valid, Need(o, "valid", proto::U8, TN));
  ASSIGN_OR_RETURN(const TensorFrame* t_last, Need(o, "last_values", proto::F32, N));
  const auto* term = static_cast<const uint8_t*>(t_term->data());
  const auto* trunc = static_cast<const uint8_t*>(t_trunc->data());
  const auto* valid = static_cast<const uint8_t*>(t_valid->data());
  GaeInput g{T,    N,     rewards.data(), t_val->data_as<float>(), t_last->data_as<float>(),
             term, trunc, valid};
  GaeOutput gae = ComputeGae(g, config_.ppo.gamma, config_.ppo.gae_lambda);
  const float* po = t_obs->data_as<float>();
  const int64_t rows_before = b->rows();
  for (int64_t i = 0; i < TN; ++i) {
    if (!valid[i]) continue;
    b->obs.insert(b->obs.end(), po + i * O, po + (i + 1) * O);
    if (spec_.discrete()) {
      b->dact.push_back(t_act->data_as<int64_t>()[i]);
    } else {
      const float* pa = t_act->data_as<float>() + i * A;
      b->cact.insert(b->cact.end(), pa, pa + A);
    }
    b->logp.push_back(t_logp->data_as<float>()[i]);
    b->values.push_back(t_val->data_as<float>()[i]);
    b->adv.push_back(gae.advantages[i]);
    b->ret.push_back(gae.returns[i]);
  }
  if (lag >= 0) {
    if (static_cast<int64_t>(b->lag_rows.size()) <= lag) b->lag_rows.resize(lag + 1, 0);
    b->lag_rows[lag] += b->rows() - rows_before;
  }
  for (const auto& e : o.result.rollout().episodes()) {
    recent_returns_.push_back(e.episode_return());
    recent_lengths_.push_back(static_cast<double>(e.length()));
    while (static_cast<int64_t>(recent_returns_.size()) > config_.ppo.return_window) {
      recent_returns_.pop_front();
      recent_lengths_.pop_front();
    }
    ++p->episodes;
  }
  p->env_steps += o.result.rollout().env_steps();
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> PpoAlgorithm::SubmitTrain(Controller& c, const std::string& trainer,
                                                   int64_t it, int64_t iterations,
                                                   int64_t behavior_version, const TrainBatch& b) {
  const int64_t rows = b.rows(), O = spec_.obs_size();
  const int64_t A = spec_.discrete() ? 1 : spec_.action_size();
  proto::WorkRequest step;
  step.mutable_train_step()->set_iteration(it);
  step.mutable_train_step()->set_num_iterations(iterations);
  step.mutable_train_step()->set_behavior_version(behavior_version);
  std::vector<TensorFrame> tensors;
  tensors.push_back(TensorFrame::Copy("obs", proto::F32, {rows, O}, b.obs.data()));
  if (spec_.discrete()) {
    tensors.push_back(TensorFrame::Copy("actions", proto::I64, {rows}, b.dact.data()));
  } else {
    tensors.push_back(TensorFrame::Copy("actions", proto::F32, {rows, A}, b.cact.data()));
  }
  tensors.push_back(TensorFrame::FromVector("logprobs", b.logp));
  tensors.push_back(TensorFrame::FromVector("values", b.values));
  tensors.push_back(TensorFrame::FromVector("advantages", b.adv));
  tensors.push_back(TensorFrame::FromVector("returns", b.ret));
  return c.Submit(trainer, std::move(step), std::move(tensors));
}

void PpoAlgorithm::IdleShares(double train_s, double stepping_s, double iteration_s,
                              IterationRecord* rec) const {
  const double workers = static_cast<double>(Units());
  rec->timings["trainer_idle_share"] = std::clamp(1.0 - train_s / iteration_s, 0.0, 1.0);
  rec->timings["stepper_idle_share"] =
      std::clamp(1.0 - stepping_s / (iteration_s * workers), 0.0, 1.0);
}

void PpoAlgorithm::RecordIteration(const WorkOutcome& trained, const TrainBatch& b, Progress* p,
                                   IterationRecord* rec) {
  SplitTimingsFromMetrics(trained.result.metrics(), rec->timings, rec->metrics);
  rec->timings["policy_s"] = b.policy_s / static_cast<double>(Units());
  rec->timings["env_s"] = b.env_s / static_cast<double>(Units());
  rec->metrics["env_steps"] = static_cast<double>(p->env_steps);
  rec->metrics["episodes"] = static_cast<double>(p->episodes);
  rec->metrics["samples"] = static_cast<double>(b.rows());
  rec->metrics["policy_version"] = static_cast<double>(p->version);
  rec->metrics["version_lag"] = static_cast<double>(b.lag);
  rec->metrics["weight_bytes"] = static_cast<double>(trained.result.weights().nbytes());
  if (episodes_cut_ > 0 || requeued_batches_ > 0) {  // only once a worker was lost
    rec->metrics["faults/episodes_cut"] = static_cast<double>(episodes_cut_);
    rec->metrics["faults/requeued_batches"] = static_cast<double>(requeued_batches_);
  }
  if (episodes_left_ > 0)
    rec->metrics["elastic/episodes_cut"] = static_cast<double>(episodes_left_);
  for (const auto& [slot, units] : b.units_by_slot) {
    rec->metrics[absl::StrCat("rollout/", slot, "/batches")] = static_cast<double>(units);
  }
  if (recent_returns_.empty()) return;
  double sr = 0, sl = 0;
  for (double r : recent_returns_) sr += r;
  for (double l : recent_lengths_) sl += l;
  double n = static_cast<double>(recent_returns_.size());
  rec->metrics["episodic_return"] = sr / n;
  rec->metrics["episode_length"] = sl / n;
  bool window_full = static_cast<int64_t>(recent_returns_.size()) >= config_.ppo.return_window;
  if (!p->solved && window_full && sr / n >= config_.ppo.solved_return &&
      config_.ppo.solved_return != 0) {
    p->solved = true;
    rec->metrics["solved_at_step"] = static_cast<double>(p->env_steps);
    spdlog::info("solved: mean return {:.1f} over the last {} episodes at {} env steps", sr / n,
                 recent_returns_.size(), p->env_steps);
  }
}

}  // namespace rlforge
