#include "sim_bridge/vector_env.h"

#include <gtest/gtest.h>

#include <cmath>

namespace rlforge::sim {
namespace {

// An env that misbehaves on purpose, to check the vector env's guards.
class NanEnv final : public Env {
 public:
  NanEnv() {
    spec_.id = "Nan-v0";
    spec_.observation = Space::Box({1}, {-1}, {1});
    spec_.action = Space::Discrete(2);
  }
  const EnvSpec& spec() const override { return spec_; }
  void Reset(std::optional<uint64_t>, float* obs) override { obs[0] = 0; }
  StepOutcome Step(const void*, float* obs) override {
    obs[0] = ++t_ == 3 ? std::nanf("") : 0.f;
    return {1.0, false};
  }

 private:
  EnvSpec spec_;
  int t_ = 0;
};

TEST(LocalVectorEnvTest, UnknownEnvSuggestsTheNearest) {
  auto v = LocalVectorEnv::Create("CartPole-v0", 2);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("did you mean CartPole-v1?"), std::string::npos)
      << v.status();
}

TEST(LocalVectorEnvTest, SeedsMakeRunsRepeatable) {
  auto run = [] {
    auto v = LocalVectorEnv::Create("CartPole-v1", 4).value();
    std::vector<float> obs;
    EXPECT_TRUE(v->Reset(std::vector<int64_t>{10, 11, 12, 13}, &obs).ok());
    StepOutput out;
    std::vector<int64_t> a = {0, 1, 0, 1};
    std::vector<float> all = obs;
    for (int t = 0; t < 100; ++t) {
      EXPECT_TRUE(v->Step(a.data(), &out).ok());
      all.insert(all.end(), out.obs.begin(), out.obs.end());
    }
    return all;
  };
  EXPECT_EQ(run(), run());
}

TEST(LocalVectorEnvTest, NonFiniteObservationNamesTheEnv) {
  std::vector<std::unique_ptr<Env>> envs;
  envs.push_back(std::make_unique<NanEnv>());
  envs.push_back(std::make_unique<NanEnv>());
  LocalVectorEnv v(std::move(envs), 0);
  std::vector<float> obs;
  ASSERT_TRUE(v.Reset({}, &obs).ok());
  std::vector<int64_t> a = {0, 0};
  StepOutput out;
  ASSERT_TRUE(v.Step(a.data(), &out).ok());
  ASSERT_TRUE(v.Step(a.data(), &out).ok());
  absl::Status s = v.Step(a.data(), &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("env 0 (Nan-v0) returned observation[0] = nan on step 3"),
            std::string::npos)
      << s;
}

TEST(LocalVectorEnvTest, OutOfRangeDiscreteActionIsAnError) {
  auto v = LocalVectorEnv::Create("CartPole-v1", 1).value();
  std::vector<float> obs;
  ASSERT_TRUE(v->Reset({}, &obs).ok());
  int64_t a = 2;
  StepOutput out;
  absl::Status s = v->Step(&a, &out);
  EXPECT_NE(s.message().find("action 2 is outside Discrete(2)"), std::string::npos) << s;
}

TEST(LocalVectorEnvTest, StepBeforeResetAndWrongSeedCountAreErrors) {
  auto v = LocalVectorEnv::Create("Pendulum-v1", 2).value();
  float a[2] = {0, 0};
  StepOutput out;
  EXPECT_FALSE(v->Step(a, &out).ok());
  std::vector<float> obs;
  EXPECT_FALSE(v->Reset(std::vector<int64_t>{1, 2, 3}, &obs).ok());
}

}  // namespace
}  // namespace rlforge::sim
