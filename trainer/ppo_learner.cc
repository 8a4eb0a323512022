#include "trainer/ppo_learner.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "trainer/lr_schedule.h"
#include "trainer/ppo_loss.h"

namespace rlforge {

PpoLearner::PpoLearner(const JobConfig& config, const proto::PolicySpec& spec)
    : config_(config), rng_(static_cast<uint64_t>(config.job.seed) * 7919 + 17) {
  // Weight init draws from torch's global generator: seed it for repeatable runs.
  torch::manual_seed(static_cast<uint64_t>(config.job.seed));
  model_ = ActorCritic(ActorCriticOptionsFor(config.policy, config.ppo, spec));
  optimizer_ = std::make_unique<FlatAdamW>(model_->parameters(),
                                           AdamWOptions(config.trainer, config.trainer.lr));
  // After FlatAdamW: it re-points the parameters, whose storage FastPpoGrad reads.
  if (config.ppo.fused_update) {
    auto fast = FastPpoGrad::Create(model_);
    if (fast.ok()) fast_ = std::move(fast).value();
  }
}

namespace {

// Mean and unbiased std normalisation, as NormalizeAdvantages, on raw floats.
void NormalizeInPlace(std::vector<float>& a) {
  if (a.size() < 2) return;
  double mean = 0;
  for (float v : a) mean += v;
  mean /= static_cast<double>(a.size());
  double ss = 0;
  for (float v : a) ss += (v - mean) * (v - mean);
  const double std = std::sqrt(ss / static_cast<double>(a.size() - 1));
  for (float& v : a) v = static_cast<float>((v - mean) / (std + 1e-8));
}

template <typename T>
std::vector<T> ToVector(const torch::Tensor& t) {
  auto c = t.contiguous();
  return std::vector<T>(c.data_ptr<T>(), c.data_ptr<T>() + c.numel());
}

// The fused path's per-sample columns as plain arrays (actions in `disc` for
// categorical heads, in `cont` for Gaussian ones).
struct FusedColumns {
  std::vector<float> obs, cont, logp, val, adv, ret;
  std::vector<int64_t> disc;

  // Rows order[first .. first + count) of `from`, gathered into this.
  void Gather(const FusedColumns& from, const std::vector<int64_t>& order, int64_t first,
              int64_t count, int64_t obs_size, int64_t act_width) {
    obs.resize(count * obs_size);
    logp.resize(count), val.resize(count), adv.resize(count), ret.resize(count);
    disc.resize(from.disc.empty() ? 0 : count);
    cont.resize(from.cont.empty() ? 0 : count * act_width);
    for (int64_t k = 0; k < count; ++k) {
      const int64_t j = order[first + k];
      std::copy_n(&from.obs[j * obs_size], obs_size, &obs[k * obs_size]);
      if (!disc.empty()) disc[k] = from.disc[j];
      if (!cont.empty()) std::copy_n(&from.cont[j * act_width], act_width, &cont[k * act_width]);
      logp[k] = from.logp[j], val[k] = from.val[j], adv[k] = from.adv[j], ret[k] = from.ret[j];
    }
  }
  void PointInto(PpoGradInputs* in) const {
    in->obs = obs.data();
    in->discrete = disc.empty() ? nullptr : disc.data();
    in->continuous = cont.empty() ? nullptr : cont.data();
    in->old_logprobs = logp.data();
    in->old_values = val.data();
    in->advantages = adv.data();
    in->returns = ret.data();
  }
};

}  // namespace

std::map<std::string, double> PpoLearner::Update(const PpoBatch& batch, int64_t iteration,
                                                 int64_t num_iterations) {
  const PpoOptions& p = config_.ppo;
  const int64_t n = batch.obs.size(0);
  const int64_t minibatches = std::min<int64_t>(p.minibatches, n);
  const int64_t mb_size = n / minibatches;
  double lr = ScheduledLearningRate(config_.trainer, iteration - 1, num_iterations);
  optimizer_->set_lr(lr);
  double clip = p.clip_coef;
  if (p.anneal_clip) clip *= 1.0 - static_cast<double>(iteration - 1) / num_iterations;

  std::map<std::string, double> m;
  if (config_.rollout.max_staleness > 0) {  // before the first step: the behaviour's lag
    const torch::Tensor w = ImportanceWeights(batch);
    m["is_weight_mean"] = w.mean().item<double>();
    m["is_weight_max"] = w.max().item<double>();
    m["is_outside_clip"] = ((w - 1).abs() > clip).to(torch::kFloat32).mean().item<double>();
  }

  double sum_pg = 0, sum_v = 0, sum_ent = 0, sum_kl = 0, sum_clip = 0, sum_norm = 0;
  int64_t updates = 0, epochs_run = 0;
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  bool stop = false;
  torch::Tensor whole_adv;
  // The fused path's inputs as plain arrays, observations normalised once
  // (the statistics change only after the update).
  FusedColumns whole_cols, mb_cols;
  const int64_t obs_size = batch.obs.size(-1);
  const int64_t act_width = model_->options().discrete ? 1 : model_->options().action_size;
  if (fast_) {
    torch::NoGradGuard g;
    whole_cols.obs = ToVector<float>(model_->NormalizedObs(batch.obs).to(torch::kFloat32));
    if (model_->options().discrete) {
      whole_cols.disc = ToVector<int64_t>(batch.actions.to(torch::kLong));
    } else {
      whole_cols.cont = ToVector<float>(batch.actions.to(torch::kFloat32));
    }
    whole_cols.logp = ToVector<float>(batch.logprobs);
    whole_cols.val = ToVector<float>(batch.values);
    whole_cols.adv = ToVector<float>(batch.advantages);
    whole_cols.ret = ToVector<float>(batch.returns);
    if (minibatches == 1 && p.normalize_advantages) NormalizeInPlace(whole_cols.adv);
  }
  auto fused_step = [&](int64_t first) {
    PpoGradInputs in;
    in.batch = mb_size;
    in.clip = clip;
    in.clip_value = p.clip_value;
    in.vf_coef = p.vf_coef;
    in.ent_coef = p.ent_coef;
    if (minibatches == 1) {
      whole_cols.PointInto(&in);
    } else {
      mb_cols.Gather(whole_cols, order, first, mb_size, obs_size, act_width);
      if (p.normalize_advantages) NormalizeInPlace(mb_cols.adv);
      mb_cols.PointInto(&in);
    }
    return fast_->LossAndGrad(in);
  };
  for (int64_t epoch = 0; epoch < p.epochs && !stop; ++epoch) {
    // One minibatch is the whole batch: its gradient does not depend on order,
    // so skip the shuffle and the gathers (and normalise advantages once).
    const bool whole = minibatches == 1;
    torch::Tensor perm;
    if (!whole) {
      std::shuffle(order.begin(), order.end(), rng_);
      if (!fast_) perm = torch::from_blob(order.data(), {n}, torch::kLong).clone();
    } else if (epoch == 0 && p.normalize_advantages && !fast_) {
      whole_adv = NormalizeAdvantages(batch.advantages);
    }
    double epoch_kl = 0;
    int64_t epoch_updates = 0;
    for (int64_t m = 0; m < minibatches; ++m) {
      double pg_loss, v_loss_value, entropy_value, approx_kl, clipfrac;
      if (fast_) {
        PpoGradResult g = fused_step(m * mb_size);
        pg_loss = g.policy_loss, v_loss_value = g.value_loss, entropy_value = g.entropy;
        approx_kl = g.approx_kl, clipfrac = g.clipfrac;
      } else {
        torch::Tensor idx;
        auto pick = [&](const torch::Tensor& t) { return whole ? t : t.index_select(0, idx); };
        if (!whole) idx = perm.slice(0, m * mb_size, (m + 1) * mb_size);
        auto out = model_->Forward(pick(batch.obs));
        auto [new_logp, entropies] = model_->LogProbAndEntropy(out, pick(batch.actions));
        torch::Tensor adv;
        if (whole) {
          adv = p.normalize_advantages ? whole_adv : batch.advantages;
        } else {
          adv = pick(batch.advantages);
          if (p.normalize_advantages) adv = NormalizeAdvantages(adv);
        }
        PolicyLoss pg = ClippedPolicyLoss(new_logp, pick(batch.logprobs), adv, clip);
        auto v_loss = ValueLoss(out.value, pick(batch.values), pick(batch.returns), p.clip_value);
        auto entropy = entropies.mean();
        auto loss = pg.loss - p.ent_coef * entropy + p.vf_coef * v_loss;
        optimizer_->ZeroGrad();
        loss.backward();
        pg_loss = pg.loss.item<double>();
        v_loss_value = v_loss.item<double>();
        entropy_value = entropy.item<double>();
        approx_kl = pg.approx_kl, clipfrac = pg.clipfrac;
      }
      double norm = 0;
      if (config_.trainer.max_grad_norm > 0) {
        norm = optimizer_->ClipGradNorm(config_.trainer.max_grad_norm);
      }
      optimizer_->Step();
      sum_pg += pg_loss;
      sum_v += v_loss_value;
      sum_ent += entropy_value;
      sum_kl += approx_kl;
      sum_clip += clipfrac;
      sum_norm += norm;
      epoch_kl += approx_kl;
      ++updates;
      ++epoch_updates;
    }
    ++epochs_run;
    if (p.target_kl > 0 && epoch_kl / static_cast<double>(epoch_updates) > p.target_kl) stop = true;
  }
  model_->UpdateObsStats(batch.obs);
  ++version_;
  double u = static_cast<double>(std::max<int64_t>(updates, 1));
  m["policy_loss"] = sum_pg / u;
  m["value_loss"] = sum_v / u;
  m["entropy"] = sum_ent / u;
  m["approx_kl"] = sum_kl / u;
  m["clipfrac"] = sum_clip / u;
  m["grad_norm"] = sum_norm / u;
  m["lr"] = lr;
  m["clip_coef"] = clip;
  m["epochs"] = static_cast<double>(epochs_run);
  m["explained_variance"] = ExplainedVariance(batch.values, batch.returns);
  if (!model_->options().discrete) m["action_std"] = model_->log_std().exp().mean().item<double>();
  return m;
}

torch::Tensor PpoLearner::ImportanceWeights(const PpoBatch& batch) {
  torch::NoGradGuard no_grad;
  auto out = model_->Forward(batch.obs);
  return (model_->LogProb(out, batch.actions) - batch.logprobs).exp();
}

namespace {

// The tensors a checkpoint of the learner holds, by archive key (plain identifiers: the
// archive is a TorchScript module, whose attribute names they become).
std::vector<std::pair<std::string, torch::Tensor>> StateTensors(ActorCritic& model,
                                                                const FlatAdamW& opt) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& p : model->parameters()) out.emplace_back(absl::StrCat("param_", out.size()), p);
  for (const auto& b : model->buffers()) out.emplace_back(absl::StrCat("buffer_", out.size()), b);
  out.emplace_back("adam_exp_avg", opt.exp_avg());
  out.emplace_back("adam_exp_avg_sq", opt.exp_avg_sq());
  return out;
}

}  // namespace

absl::Status PpoLearner::SaveState(const std::string& path) {
  torch::serialize::OutputArchive a;
  for (const auto& [key, t] : StateTensors(model_, *optimizer_)) a.write(key, t.detach());
  std::ostringstream rng;
  rng << rng_;
  a.write("rng", c10::IValue(rng.str()));
  a.write("version", c10::IValue(version_));
  a.write("adam_steps", c10::IValue(optimizer_->steps()));
  // Written whole and synced: a crash or a full disk leaves the previous file, never a part.
  std::ostringstream bytes;
  a.save_to(bytes);
  return WriteFileAtomic(path, bytes.str());
}

absl::Status PpoLearner::LoadState(const std::string& path) {
  torch::serialize::InputArchive a;
  a.load_from(path);
  torch::NoGradGuard no_grad;
  for (auto& [key, t] : StateTensors(model_, *optimizer_)) {
    torch::Tensor saved;
    if (!a.try_read(key, saved) || saved.sizes() != t.sizes() || saved.dtype() != t.dtype()) {
      return absl::DataLossError(absl::StrCat(path, ": '", key, "' is missing or has another ",
                                              "shape or dtype than this job's model"));
    }
    t.copy_(saved);
  }
  c10::IValue rng, version, steps;
  if (!a.try_read("rng", rng) || !a.try_read("version", version) ||
      !a.try_read("adam_steps", steps)) {
    return absl::DataLossError(absl::StrCat(path, ": no rng, version or adam_steps entry"));
  }
  std::istringstream in(rng.toStringRef());
  in >> rng_;
  if (!in) return absl::DataLossError(absl::StrCat(path, ": unreadable rng state"));
  version_ = version.toInt();
  optimizer_->set_steps(steps.toInt());
  return absl::OkStatus();
}

}  // namespace rlforge
