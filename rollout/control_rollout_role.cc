#include "rollout/control_rollout_role.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/clock.h"
#include "common/cpu_affinity.h"
#include "common/exceptions.h"
#include "common/logging.h"
#include "common/status.h"
#include "models/compute_threads.h"
#include "sim_bridge/remote_vector_env.h"

namespace rlforge {

ControlRolloutRole::ControlRolloutRole(const JobConfig& config, const proto::Assignment& assignment)
    : config_(config), assignment_(assignment) {
  // One thread per worker: workers are many, batches per step are small.
  SetComputeThreads(1);
}

absl::StatusOr<WorkReply> ControlRolloutRole::Handle(const proto::WorkRequest& request,
                                                     std::vector<TensorFrame> tensors) {
  return CallCatching([&]() -> absl::StatusOr<WorkReply> {
    switch (request.task_case()) {
      case proto::WorkRequest::kRolloutSetup:
        return Setup(request.rollout_setup());
      case proto::WorkRequest::kLoadWeights:
        return Load(request.load_weights(), tensors);
      case proto::WorkRequest::kRollout:
        return Rollout(request.rollout());
      case proto::WorkRequest::kSaveState:
        return SaveState(request.save_state());
      case proto::WorkRequest::kLoadState:
        return LoadState(request.load_state());
      default:
        return absl::InvalidArgumentError(
            "the control rollout worker takes rollout_setup, load_weights, rollout, save_state "
            "and load_state work");
    }
  });
}

absl::StatusOr<WorkReply> ControlRolloutRole::Setup(const proto::RolloutSetup& setup) {
  if (!setup.cpus().empty()) {
    std::vector<int> cpus(setup.cpus().begin(), setup.cpus().end());
    RETURN_IF_ERROR(Annotate(PinProcess(cpus), "sim.cpu_affinity"));
    spdlog::info("pinned to cpus {} (sim.cpu_affinity)", FormatCpuList(cpus));
  }
  first_env_index_ = setup.first_env_index();
  rng_.seed(static_cast<uint64_t>(setup.seed()) * 1000003ull +
            static_cast<uint64_t>(assignment_.rank()));
  if (setup.sim_endpoints().empty()) {
    ASSIGN_OR_RETURN(
        envs_, sim::LocalVectorEnv::Create(config_.env.id, static_cast<int>(config_.env.num_envs),
                                           static_cast<int>(config_.env.max_episode_steps)));
  } else {
    std::vector<sim::SimServerAddress> servers;
    for (int i = 0; i < setup.sim_endpoints_size(); ++i) {
      servers.push_back({setup.sim_names(i), setup.sim_endpoints(i)});
    }
    sim::RemoteVectorEnv::Options o;
    o.timeout_ms = static_cast<int>(config_.sim.step_timeout_s * 1000);
    o.connect_timeout_ms = static_cast<int>(config_.sim.start_timeout_s * 1000);
    o.env_id = config_.env.id;
    ASSIGN_OR_RETURN(envs_, sim::RemoteVectorEnv::Connect(zmq_, servers, o));
  }
  const sim::EnvSpec& es = envs_->spec();
  std::vector<int64_t> seeds;
  for (int i = 0; i < envs_->num_envs(); ++i) {
    seeds.push_back(setup.seed() * 1000003 + first_env_index_ + i);
  }
  RETURN_IF_ERROR(envs_->Reset(seeds, &obs_));
  spec_.Clear();
  spec_.set_env_id(es.id);
  spec_.set_obs_size(es.observation.flat_size());
  spec_.set_discrete(es.action.is_discrete());
  spec_.set_action_size(es.action.is_discrete() ? es.action.n : es.action.flat_size());
  for (double v : es.action.low) spec_.add_action_low(v);
  for (double v : es.action.high) spec_.add_action_high(v);
  spec_.set_num_envs(envs_->num_envs());
  WorkReply reply;
  *reply.result.mutable_policy_spec() = spec_;
  return reply;
}

absl::StatusOr<WorkReply> ControlRolloutRole::Load(const proto::LoadWeights& load,
                                                   std::vector<TensorFrame>& tensors) {
  if (!envs_) return absl::FailedPreconditionError("load_weights before rollout_setup");
  const Stopwatch timer;
  if (!model_) {
    model_ = ActorCritic(ActorCriticOptionsFor(config_.policy, config_.ppo, spec_));
    model_->eval();
    flat_.resize(static_cast<size_t>(FlatSize(*model_)));
    reader_ = std::make_unique<PolicyReader>(assignment_.actor_id(),
                                             ToTensorSpecs(FlatLayout(*model_)),
                                             LayoutHash(*model_), config_.weights.timeout_s);
  }
  const proto::WeightsReady& w = load.weights();
  RETURN_IF_ERROR(reader_->Read(w, tensors, flat_.data()).status());
  LoadFlat(*model_, flat_.data());
  version_ = w.version();
  WorkReply reply;
  *reply.result.mutable_weights() = w;
  (*reply.result.mutable_metrics())["load_s"] = timer.Seconds();
  return reply;
}

void ControlRolloutRole::Sample(const ActorCriticImpl::Output& out, std::vector<int64_t>* discrete,
                                std::vector<float>* learner_actions,
                                std::vector<float>* env_actions) {
  const int64_t n = out.logits_or_mean.size(0);
  const int64_t a = spec_.action_size();
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  if (spec_.discrete()) {
    auto probs = torch::softmax(out.logits_or_mean, -1).contiguous();
    const float* p = probs.data_ptr<float>();
    discrete->resize(n);
    for (int64_t i = 0; i < n; ++i) {
      double u = uniform(rng_), c = 0;
      int64_t k = 0;
      for (; k < a - 1; ++k) {
        c += p[i * a + k];
        if (u < c) break;
      }
      (*discrete)[i] = k;
    }
    return;
  }
  auto mean = out.logits_or_mean.contiguous();
  auto std = model_->log_std().exp().contiguous();
  const float* m = mean.data_ptr<float>();
  const float* s = std.data_ptr<float>();
  std::normal_distribution<double> normal(0.0, 1.0);
  learner_actions->resize(n * a);
  env_actions->resize(n * a);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = 0; k < a; ++k) {
      float x = static_cast<float>(m[i * a + k] + s[k] * normal(rng_));
      (*learner_actions)[i * a + k] = x;
      double lo = k < spec_.action_low_size() ? spec_.action_low(k) : -INFINITY;
      double hi = k < spec_.action_high_size() ? spec_.action_high(k) : INFINITY;
      (*env_actions)[i * a + k] = static_cast<float>(std::clamp<double>(x, lo, hi));
    }
  }
}

bool ControlRolloutRole::Pipelined() const {
  if (envs_->num_groups() < 2 || config_.sim.pipeline == SimPipeline::kOff) return false;
  if (config_.sim.pipeline == SimPipeline::kOn) return true;
  // auto: the 1st rollout warms up (as one batch), the 2nd is timed
  // pipelined, the 3rd as one batch; then the faster stays.
  if (rollouts_ == 0) return false;
  if (rollouts_ == 1) return true;
  if (rollouts_ == 2) return false;
  return pipelined_step_s_ < batch_step_s_;
}

void ControlRolloutRole::TimePipeline(int64_t steps, double seconds) {
  ++rollouts_;
  if (config_.sim.pipeline != SimPipeline::kAuto || envs_->num_groups() < 2 || rollouts_ > 3)
    return;
  if (rollouts_ == 2) pipelined_step_s_ = seconds / static_cast<double>(steps);
  if (rollouts_ == 3) {
    batch_step_s_ = seconds / static_cast<double>(steps);
    spdlog::info(
        "sim.pipeline auto: {:.1f} us a step pipelined over {} servers, {:.1f} us as one batch: "
        "{}",
        pipelined_step_s_ * 1e6, envs_->num_groups(), batch_step_s_ * 1e6,
        pipelined_step_s_ < batch_step_s_ ? "pipelined" : "one batch");
  }
}

// With sim.pipeline the envs step group by group (a group is one sim server's envs): while
// group g steps, the policy acts for group g+1, so a step costs only what the policy does not
// hide. Groups are contiguous and visited in order, so the sampler draws in the same order as
// one batch. Otherwise one group of every env, stepped with one Step.
struct ControlRolloutRole::Pass {
  Pass(int64_t steps, int64_t envs, int64_t obs_size, int64_t action_size, bool discrete_actions,
       int group_count, bool pipelined_groups)
      : T(steps),
        N(envs),
        O(obs_size),
        A(action_size),
        discrete(discrete_actions),
        pipelined(pipelined_groups),
        obs(T * N * O),
        logp(T * N),
        values(T * N),
        rewards(T * N),
        last(N),
        dactions(discrete ? T * N : 0),
        cactions(discrete ? 0 : T * N * A),
        term(T * N),
        trunc(T * N),
        valid(T * N),
        g_discrete(group_count),
        g_learner(group_count),
        g_env(group_count) {}

  const int64_t T, N, O, A;
  const bool discrete, pipelined;
  std::vector<float> obs, logp, values, rewards, last;
  std::vector<int64_t> dactions;
  std::vector<float> cactions;
  std::vector<uint8_t> term, trunc, valid;
  std::vector<std::vector<int64_t>> g_discrete;  // actions in flight, per group
  std::vector<std::vector<float>> g_learner, g_env;
  const void* step_actions = nullptr;  // not pipelined: the batch's, until Observe
  sim::StepOutput out;
  double policy_s = 0, env_s = 0;
  WorkReply reply;

  // First env and env count of group g (one group of every env when not pipelined).
  int64_t First(const sim::VectorEnv& envs, int g) const {
    return pipelined ? envs.group_offset(g) : 0;
  }
  int64_t Count(const sim::VectorEnv& envs, int g) const {
    return pipelined ? envs.group_size(g) : N;
  }

  // The buffers as the reply's tensors, and the timings.
  void Finish() {
    reply.result.mutable_rollout()->set_env_steps(T * N);
    auto add = [&](const char* name, proto::DType dtype, std::vector<int64_t> shape,
                   const void* data) {
      reply.tensors.push_back(TensorFrame::Copy(name, dtype, shape, data));
    };
    add("obs", proto::F32, {T, N, O}, obs.data());
    if (discrete) {
      add("actions", proto::I64, {T, N}, dactions.data());
    } else {
      add("actions", proto::F32, {T, N, A}, cactions.data());
    }
    add("logprobs", proto::F32, {T, N}, logp.data());
    add("values", proto::F32, {T, N}, values.data());
    add("rewards", proto::F32, {T, N}, rewards.data());
    add("terminated", proto::U8, {T, N}, term.data());
    add("truncated", proto::U8, {T, N}, trunc.data());
    add("valid", proto::U8, {T, N}, valid.data());
    add("last_values", proto::F32, {N}, last.data());
    (*reply.result.mutable_metrics())["policy_s"] = policy_s;
    (*reply.result.mutable_metrics())["env_s"] = env_s;
  }
};

absl::Status ControlRolloutRole::Act(Pass& p, int64_t t, int g) {
  Stopwatch timer;
  const int64_t N = p.N, O = p.O, off = p.First(*envs_, g), n = p.Count(*envs_, g);
  float* o = obs_.data() + off * O;
  std::memcpy(p.obs.data() + (t * N + off) * O, o, n * O * sizeof(float));
  auto pout = model_->Forward(torch::from_blob(o, {n, O}, torch::kFloat32));
  Sample(pout, &p.g_discrete[g], &p.g_learner[g], &p.g_env[g]);
  torch::Tensor act_t = p.discrete
                            ? torch::from_blob(p.g_discrete[g].data(), {n}, torch::kLong)
                            : torch::from_blob(p.g_learner[g].data(), {n, p.A}, torch::kFloat32);
  auto lp = model_->LogProb(pout, act_t).contiguous();
  auto v = pout.value.contiguous();
  std::memcpy(p.logp.data() + t * N + off, lp.data_ptr<float>(), n * sizeof(float));
  std::memcpy(p.values.data() + t * N + off, v.data_ptr<float>(), n * sizeof(float));
  if (p.discrete) {
    std::copy(p.g_discrete[g].begin(), p.g_discrete[g].end(), p.dactions.begin() + t * N + off);
  } else {
    std::copy(p.g_learner[g].begin(), p.g_learner[g].end(),
              p.cactions.begin() + (t * N + off) * p.A);
  }
  p.policy_s += timer.Lap();
  const void* env_act = p.discrete ? static_cast<const void*>(p.g_discrete[g].data())
                                   : static_cast<const void*>(p.g_env[g].data());
  const auto* bytes = static_cast<const uint8_t*>(env_act);
  action_log_.insert(action_log_.end(), bytes, bytes + n * EnvActionBytes());
  if (p.pipelined) {
    absl::Status s = envs_->BeginStep(g, env_act);
    p.env_s += timer.Seconds();
    return s;
  }
  p.step_actions = env_act;  // stepped as one batch by Observe
  return absl::OkStatus();
}

absl::Status ControlRolloutRole::Observe(Pass& p, int64_t t, int g) {
  const Stopwatch timer;
  RETURN_IF_ERROR(p.pipelined ? envs_->EndStep(g, &p.out) : envs_->Step(p.step_actions, &p.out));
  p.env_s += timer.Seconds();
  const int64_t N = p.N, off = p.First(*envs_, g), n = p.Count(*envs_, g);
  for (int64_t i = 0; i < n; ++i) {
    p.rewards[t * N + off + i] = static_cast<float>(p.out.reward[i]);
    p.term[t * N + off + i] = p.out.terminated[i];
    p.trunc[t * N + off + i] = p.out.truncated[i];
    p.valid[t * N + off + i] = p.out.reset[i] ? 0 : 1;
  }
  for (const auto& e : p.out.episodes) {
    proto::EpisodeStat* ep = p.reply.result.mutable_rollout()->add_episodes();
    ep->set_env_index(first_env_index_ + e.env_index);
    ep->set_episode_return(e.episode_return);
    ep->set_length(e.length);
  }
  std::memcpy(obs_.data() + off * p.O, p.out.obs.data(), n * p.O * sizeof(float));
  return absl::OkStatus();
}

absl::StatusOr<WorkReply> ControlRolloutRole::Rollout(const proto::RolloutTask& task) {
  if (!model_) return absl::FailedPreconditionError("rollout before load_weights");
  const bool pipelined = Pipelined();
  const int G = pipelined ? envs_->num_groups() : 1;
  Pass p(task.num_steps(), envs_->num_envs(), spec_.obs_size(),
         spec_.discrete() ? 1 : spec_.action_size(), spec_.discrete(), G, pipelined);
  torch::InferenceMode guard;
  const Stopwatch loop_timer;
  auto at = [&](const absl::Status& s) {
    return Annotate(s, absl::StrCat("envs at ", envs_->location()));
  };
  for (int64_t t = 0; t < p.T; ++t) {
    for (int g = 0; g < G; ++g) {
      if (t > 0) {
        absl::Status s = Observe(p, t - 1, g);
        if (!s.ok()) return at(s);
      }
      absl::Status s = Act(p, t, g);
      if (!s.ok()) return at(s);
    }
  }
  for (int g = 0; g < G; ++g) {
    absl::Status s = Observe(p, p.T - 1, g);
    if (!s.ok()) return at(s);
  }
  TimePipeline(p.T, loop_timer.Seconds());
  auto lv = model_->Value(torch::from_blob(obs_.data(), {p.N, p.O}, torch::kFloat32)).contiguous();
  std::memcpy(p.last.data(), lv.data_ptr<float>(), p.N * sizeof(float));
  p.Finish();
  return std::move(p.reply);
}

int64_t ControlRolloutRole::EnvActionBytes() const {
  return spec_.discrete() ? static_cast<int64_t>(sizeof(int64_t))
                          : spec_.action_size() * static_cast<int64_t>(sizeof(float));
}

absl::StatusOr<WorkReply> ControlRolloutRole::SaveState(const proto::SaveState& save) {
  if (!envs_) return absl::FailedPreconditionError("save_state before rollout_setup");
  std::error_code ec;
  std::filesystem::create_directories(save.dir(), ec);
  if (ec) {
    return absl::UnavailableError(absl::StrCat("cannot create ", save.dir(), ": ", ec.message()));
  }
  torch::serialize::OutputArchive a;
  std::ostringstream rng;
  rng << rng_;
  a.write("rng", c10::IValue(rng.str()));
  a.write("actions", torch::from_blob(action_log_.data(),
                                      {static_cast<int64_t>(action_log_.size())}, torch::kUInt8)
                         .clone());
  a.write(
      "obs",
      torch::from_blob(obs_.data(), {static_cast<int64_t>(obs_.size())}, torch::kFloat32).clone());
  // Written whole and synced: a crash or a full disk leaves the previous file, never a part.
  std::ostringstream bytes;
  a.save_to(bytes);
  RETURN_IF_ERROR(WriteFileAtomic(save.dir() + "/rollout.pt", bytes.str()));
  return WorkReply();
}

absl::StatusOr<WorkReply> ControlRolloutRole::LoadState(const proto::LoadState& load) {
  if (!envs_) return absl::FailedPreconditionError("load_state before rollout_setup");
  const std::string path = load.dir() + "/rollout.pt";
  torch::serialize::InputArchive a;
  a.load_from(path);
  c10::IValue rng;
  torch::Tensor actions, obs;
  if (!a.try_read("rng", rng) || !a.try_read("actions", actions) || !a.try_read("obs", obs)) {
    return absl::DataLossError(absl::StrCat(path, ": no rng, actions or obs entry"));
  }
  const int64_t batch_bytes = envs_->num_envs() * EnvActionBytes();
  if (actions.numel() % batch_bytes != 0 || obs.numel() != static_cast<int64_t>(obs_.size())) {
    return absl::DataLossError(absl::StrCat(path, ": saved for another env count or spec"));
  }
  const Stopwatch timer;
  const auto* log = actions.data_ptr<uint8_t>();
  sim::StepOutput out;
  for (int64_t off = 0; off < actions.numel(); off += batch_bytes) {
    RETURN_IF_ERROR(Annotate(envs_->Step(log + off, &out),
                             absl::StrCat("replaying the saved actions on ", envs_->location())));
    std::memcpy(obs_.data(), out.obs.data(), obs_.size() * sizeof(float));
  }
  if (std::memcmp(obs_.data(), obs.data_ptr<float>(), obs_.size() * sizeof(float)) != 0) {
    return absl::DataLossError(absl::StrCat(
        "replaying ", actions.numel() / batch_bytes, " saved steps on ", envs_->location(),
        " did not reach the saved observations: the simulator is not deterministic for a seed "
        "and an action sequence, so this checkpoint cannot restore it"));
  }
  std::istringstream in(rng.toStringRef());
  in >> rng_;
  if (!in) return absl::DataLossError(absl::StrCat(path, ": unreadable rng state"));
  action_log_.assign(log, log + actions.numel());
  spdlog::info("replayed {} steps of {} envs from {} in {:.3f} s", actions.numel() / batch_bytes,
               envs_->num_envs(), path, timer.Seconds());
  return WorkReply();
}

}  // namespace rlforge
