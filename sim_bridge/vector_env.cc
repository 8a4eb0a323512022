#include "sim_bridge/vector_env.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace rlforge::sim {

void StepOutput::Resize(int num_envs, int64_t obs_size) {
  obs.resize(static_cast<size_t>(num_envs * obs_size));
  reward.resize(num_envs);
  terminated.resize(num_envs);
  truncated.resize(num_envs);
  reset.resize(num_envs);
  episodes.clear();
}

absl::Status VectorEnv::BeginStep(int g, const void* actions) {
  if (g != 0) return absl::InvalidArgumentError(absl::StrCat("no env group ", g, " here"));
  if (pending_actions_ != nullptr) return absl::FailedPreconditionError("BeginStep twice");
  pending_actions_ = actions;
  return absl::OkStatus();
}

absl::Status VectorEnv::EndStep(int g, StepOutput* out) {
  if (g != 0) return absl::InvalidArgumentError(absl::StrCat("no env group ", g, " here"));
  if (pending_actions_ == nullptr) return absl::FailedPreconditionError("EndStep before BeginStep");
  const void* actions = pending_actions_;
  pending_actions_ = nullptr;
  return Step(actions, out);
}

absl::StatusOr<std::unique_ptr<LocalVectorEnv>> LocalVectorEnv::Create(const std::string& env_id,
                                                                       int num_envs,
                                                                       int max_episode_steps) {
  if (num_envs < 1) return absl::InvalidArgumentError("num_envs must be at least 1");
  std::vector<std::unique_ptr<Env>> envs;
  for (int i = 0; i < num_envs; ++i) {
    ASSIGN_OR_RETURN(auto env, MakeEnv(env_id));
    envs.push_back(std::move(env));
  }
  return std::make_unique<LocalVectorEnv>(std::move(envs), max_episode_steps);
}

LocalVectorEnv::LocalVectorEnv(std::vector<std::unique_ptr<Env>> envs, int max_episode_steps)
    : envs_(std::move(envs)) {
  spec_ = envs_.at(0)->spec();
  if (max_episode_steps > 0) spec_.max_episode_steps = max_episode_steps;
  needs_reset_.assign(envs_.size(), 0);
  elapsed_.assign(envs_.size(), 0);
  episode_return_.assign(envs_.size(), 0);
}

absl::Status LocalVectorEnv::CheckFinite(int i, const float* obs, double reward,
                                         const char* what) const {
  last_error_env_ = i;
  int64_t n = spec_.observation.flat_size();
  for (int64_t k = 0; k < n; ++k) {
    if (!std::isfinite(obs[k])) {
      return absl::DataLossError(absl::StrCat("env ", i, " (", spec_.id, ") returned observation[",
                                              k, "] = ", obs[k], " on ", what));
    }
  }
  if (!std::isfinite(reward)) {
    return absl::DataLossError(
        absl::StrCat("env ", i, " (", spec_.id, ") returned reward ", reward, " on ", what));
  }
  last_error_env_ = -1;
  return absl::OkStatus();
}

absl::Status LocalVectorEnv::Reset(absl::Span<const int64_t> seeds, std::vector<float>* obs) {
  int n = num_envs();
  if (!seeds.empty() && static_cast<int>(seeds.size()) != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("reset got ", seeds.size(), " seeds for ", n, " envs"));
  }
  int64_t obs_size = spec_.observation.flat_size();
  obs->resize(static_cast<size_t>(n * obs_size));
  for (int i = 0; i < n; ++i) {
    std::optional<uint64_t> seed;
    if (!seeds.empty() && seeds[i] >= 0) seed = static_cast<uint64_t>(seeds[i]);
    float* o = obs->data() + i * obs_size;
    envs_[i]->Reset(seed, o);
    RETURN_IF_ERROR(CheckFinite(i, o, 0.0, "reset"));
    needs_reset_[i] = 0;
    elapsed_[i] = 0;
    episode_return_[i] = 0;
  }
  started_ = true;
  return absl::OkStatus();
}

absl::Status LocalVectorEnv::Step(const void* actions, StepOutput* out) {
  if (!started_) return absl::FailedPreconditionError("step before reset");
  int n = num_envs();
  int64_t obs_size = spec_.observation.flat_size();
  int64_t act_size = spec_.action.flat_size();
  out->Resize(n, obs_size);
  for (int i = 0; i < n; ++i) {
    float* o = out->obs.data() + i * obs_size;
    if (needs_reset_[i]) {
      envs_[i]->Reset(std::nullopt, o);
      RETURN_IF_ERROR(CheckFinite(i, o, 0.0, "autoreset"));
      out->reward[i] = 0;
      out->terminated[i] = out->truncated[i] = 0;
      out->reset[i] = 1;
      needs_reset_[i] = 0;
      elapsed_[i] = 0;
      episode_return_[i] = 0;
      continue;
    }
    const void* a =
        spec_.action.is_discrete()
            ? static_cast<const void*>(static_cast<const int64_t*>(actions) + i)
            : static_cast<const void*>(static_cast<const float*>(actions) + i * act_size);
    if (spec_.action.is_discrete()) {
      int64_t ai = *static_cast<const int64_t*>(a);
      if (ai < 0 || ai >= spec_.action.n) {
        last_error_env_ = i;
        return absl::InvalidArgumentError(absl::StrCat("env ", i, " (", spec_.id, "): action ", ai,
                                                       " is outside ", spec_.action.ToString()));
      }
    }
    StepOutcome r = envs_[i]->Step(a, o);
    RETURN_IF_ERROR(CheckFinite(i, o, r.reward, absl::StrCat("step ", elapsed_[i] + 1).c_str()));
    ++elapsed_[i];
    episode_return_[i] += r.reward;
    out->reward[i] = r.reward;
    out->terminated[i] = r.terminated ? 1 : 0;
    // Gymnasium's TimeLimit: truncated whenever the limit is reached, even on
    // the step that also terminates.
    bool truncated = spec_.max_episode_steps > 0 && elapsed_[i] >= spec_.max_episode_steps;
    out->truncated[i] = truncated ? 1 : 0;
    out->reset[i] = 0;
    if (r.terminated || truncated) {
      out->episodes.push_back({i, episode_return_[i], elapsed_[i]});
      needs_reset_[i] = 1;
    }
  }
  return absl::OkStatus();
}

}  // namespace rlforge::sim
