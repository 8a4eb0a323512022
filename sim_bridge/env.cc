#include "sim_bridge/env.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/hash.h"
#include "common/strings.h"
#include "sim_bridge/envs/classic_control.h"
#include "sim_bridge/envs/template_env.h"

namespace rlforge::sim {

Space Space::Box(std::vector<int64_t> shape, std::vector<double> low, std::vector<double> high) {
  Space s;
  s.kind = Kind::kBox;
  s.shape = std::move(shape);
  s.dtype = proto::F32;
  s.low = std::move(low);
  s.high = std::move(high);
  return s;
}

Space Space::Discrete(int64_t n) {
  Space s;
  s.kind = Kind::kDiscrete;
  s.dtype = proto::I64;
  s.n = n;
  return s;
}

int64_t Space::flat_size() const {
  if (is_discrete()) return 1;
  int64_t n_elems = 1;
  for (int64_t d : shape) n_elems *= d;
  return n_elems;
}

std::string Space::ToString() const {
  if (is_discrete()) return absl::StrCat("Discrete(", n, ")");
  return absl::StrCat("Box(", absl::StrJoin(shape, ","), shape.size() == 1 ? ",)" : ")");
}

// splitmix64: tiny, fast, and the same on every platform.
void EnvRng::Seed(uint64_t seed) { state_ = seed; }

uint64_t EnvRng::Next() {
  const uint64_t out = SplitMix64(state_);
  state_ += kSplitMix64Gamma;
  return out;
}

double EnvRng::Uniform(double lo, double hi) {
  double u = static_cast<double>(Next() >> 11) * 0x1.0p-53;
  return lo + (hi - lo) * u;
}

namespace {

struct EnvEntry {
  const char* id;
  std::unique_ptr<Env> (*make)();
};

template <typename T>
std::unique_ptr<Env> Make() {
  return std::make_unique<T>();
}

// Every built-in env. Adding one: write it (start from envs/template_env.cc), add a line.
constexpr EnvEntry kEnvs[] = {
    {"CartPole-v1", &Make<CartPoleEnv>},
    {"Pendulum-v1", &Make<PendulumEnv>},
    {"Acrobot-v1", &Make<AcrobotEnv>},
    {"PointMass-v0", &Make<PointMassEnv>},
};

}  // namespace

std::vector<std::string> KnownEnvs() {
  std::vector<std::string> ids;
  for (const auto& e : kEnvs) ids.push_back(e.id);
  return ids;
}

absl::StatusOr<std::unique_ptr<Env>> MakeEnv(const std::string& id) {
  for (const auto& e : kEnvs) {
    if (id == e.id) return e.make();
  }
  std::string msg = absl::StrCat("unknown env '", id, "'");
  std::string near = NearestWord(id, KnownEnvs());
  if (!near.empty()) absl::StrAppend(&msg, " (did you mean ", near, "?)");
  absl::StrAppend(&msg, "; built-in envs: ", JoinOr(KnownEnvs()),
                  ". Other simulators connect over sim_bridge (docs/sim_bridge.md).");
  return absl::NotFoundError(msg);
}

}  // namespace rlforge::sim
