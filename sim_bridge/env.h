// Env: one simulated environment, Gymnasium-style; the extension point for
// built-in C++ simulators (see envs/template_env.cc for a documented example).
//
// Reset(seed) -> obs;  Step(action) -> obs, reward, terminated
//
// Time limits (truncation), autoreset and episode statistics are not the env's
// business: LocalVectorEnv adds them, exactly as Gymnasium's wrappers do.
// An Env is used from one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/tensor_frame.h"

namespace rlforge::sim {

struct Space {
  enum class Kind { kBox, kDiscrete };
  Kind kind = Kind::kBox;
  std::vector<int64_t> shape;     // Box: element shape; Discrete: {}
  DType dtype = proto::F32;       // Box: f32; Discrete: i64
  std::vector<double> low, high;  // Box: one bound per element (may be +-inf)
  int64_t n = 0;                  // Discrete: number of actions

  static Space Box(std::vector<int64_t> shape, std::vector<double> low, std::vector<double> high);
  static Space Discrete(int64_t n);
  // Elements per env: product of shape for Box, 1 for Discrete.
  int64_t flat_size() const;
  bool is_discrete() const { return kind == Kind::kDiscrete; }
  std::string ToString() const;  // "Box(3,)", "Discrete(2)"
};

struct EnvSpec {
  std::string id;
  Space observation;  // always Box f32 for built-in envs
  Space action;
  int max_episode_steps = 0;  // 0: no time limit
};

struct StepOutcome {
  double reward = 0;
  bool terminated = false;
};

class Env {
 public:
  virtual ~Env() = default;
  virtual const EnvSpec& spec() const = 0;
  // Starts an episode and writes its first observation (flat_size floats).
  // A seed re-seeds the env's own generator; nullopt continues it.
  virtual void Reset(std::optional<uint64_t> seed, float* obs) = 0;
  // `action` points at one int64 (Discrete) or action.flat_size() floats (Box).
  virtual StepOutcome Step(const void* action, float* obs) = 0;
};

// Deterministic, platform-independent generator for env resets.
class EnvRng {
 public:
  void Seed(uint64_t seed);
  uint64_t Next();
  // Uniform in [lo, hi).
  double Uniform(double lo, double hi);

 private:
  uint64_t state_ = 0x853c49e6748fea9bull;
};

// Built-in envs by Gymnasium id ("CartPole-v1"); unknown ids are an error that
// lists the known ones.
absl::StatusOr<std::unique_ptr<Env>> MakeEnv(const std::string& id);
std::vector<std::string> KnownEnvs();

}  // namespace rlforge::sim
