// VectorEnv: a batch of envs stepped together, with Gymnasium 1.x vector
// semantics (next-step autoreset). Rollout workers see only this interface,
// so envs in-process (LocalVectorEnv) and envs behind sim_bridge servers
// (RemoteVectorEnv) are interchangeable.
//
// actions[N] -> Step -> obs[N], reward[N], terminated[N], truncated[N], episodes
//
// Autoreset: the step that ends env i's episode returns its final observation
// with terminated/truncated set (so a learner can bootstrap a truncated
// episode from it); the next Step ignores action i and returns the first
// observation of a new episode, reward 0, both flags false, `reset[i] = 1`.
// Buffers are the caller's. Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "sim_bridge/env.h"

namespace rlforge::sim {

struct EpisodeRecord {
  int env_index = 0;
  double episode_return = 0;
  int64_t length = 0;
};

// Caller-owned outputs of one step, sized for num_envs.
struct StepOutput {
  std::vector<float> obs;               // [N * obs_size]
  std::vector<double> reward;           // [N]
  std::vector<uint8_t> terminated;      // [N]
  std::vector<uint8_t> truncated;       // [N]
  std::vector<uint8_t> reset;           // [N] 1 where this step began a new episode
  std::vector<EpisodeRecord> episodes;  // episodes that ended on this step
  void Resize(int num_envs, int64_t obs_size);
};

class VectorEnv {
 public:
  virtual ~VectorEnv() = default;
  virtual const EnvSpec& spec() const = 0;
  virtual int num_envs() const = 0;
  // Starts every env; seeds is empty or one per env (negative: do not re-seed).
  virtual absl::Status Reset(absl::Span<const int64_t> seeds, std::vector<float>* obs) = 0;
  // `actions`: N int64 for Discrete, N * action_size floats for Box.
  virtual absl::Status Step(const void* actions, StepOutput* out) = 0;
  // Where these envs live, for error messages ("in-process", "tcp://...").
  virtual std::string location() const = 0;

  // Split-phase stepping by groups of envs, so that a caller can compute one
  // group's next actions while the others step (a rollout worker with several
  // sim servers hides their round trips this way). A group is one sim server's
  // envs for RemoteVectorEnv and every env for LocalVectorEnv. Groups are
  // contiguous: group g holds envs [group_offset(g), group_offset(g) + group_size(g)).
  // BeginStep(g, actions) takes group g's actions (they must stay valid until
  // EndStep(g)); EndStep(g, out) waits for that step and fills `out` for the
  // group alone (group_size(g) envs; EpisodeRecord::env_index stays global).
  // Stepping every group this way is the same as one Step.
  virtual int num_groups() const { return 1; }
  virtual int group_offset(int /*g*/) const { return 0; }
  virtual int group_size(int /*g*/) const { return num_envs(); }
  virtual absl::Status BeginStep(int g, const void* actions);
  virtual absl::Status EndStep(int g, StepOutput* out);

 private:
  const void* pending_actions_ = nullptr;  // the one group's, between BeginStep and EndStep
};

// Envs in this process, with Gymnasium's TimeLimit, autoreset and episode
// statistics. Checks every observation and reward for NaN or infinity.
class LocalVectorEnv final : public VectorEnv {
 public:
  // `max_episode_steps` <= 0 keeps the env's own limit.
  static absl::StatusOr<std::unique_ptr<LocalVectorEnv>> Create(const std::string& env_id,
                                                                int num_envs,
                                                                int max_episode_steps = 0);
  // Takes ownership of already-built envs (all of the same spec).
  LocalVectorEnv(std::vector<std::unique_ptr<Env>> envs, int max_episode_steps);

  const EnvSpec& spec() const override { return spec_; }
  int num_envs() const override { return static_cast<int>(envs_.size()); }
  absl::Status Reset(absl::Span<const int64_t> seeds, std::vector<float>* obs) override;
  absl::Status Step(const void* actions, StepOutput* out) override;
  std::string location() const override { return "in-process"; }
  // Index of the env that caused the last error, or -1.
  int last_error_env() const { return last_error_env_; }

 private:
  absl::Status CheckFinite(int i, const float* obs, double reward, const char* what) const;

  std::vector<std::unique_ptr<Env>> envs_;
  EnvSpec spec_;
  std::vector<uint8_t> needs_reset_;
  std::vector<int64_t> elapsed_;
  std::vector<double> episode_return_;
  bool started_ = false;
  mutable int last_error_env_ = -1;
};

}  // namespace rlforge::sim
