// The built-in classic-control envs against trajectories recorded from
// Gymnasium itself (tools/make_gym_fixtures.py -> tests/data/gym/*.json).
#include "sim_bridge/envs/classic_control.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "nlohmann/json.hpp"
#include "rlforge_paths.h"
#include "sim_bridge/vector_env.h"

namespace rlforge::sim {
namespace {

using nlohmann::json;

json LoadFixture(const std::string& name) {
  std::ifstream in(std::string(RLFORGE_SOURCE_DIR_DEFAULT) + "/tests/data/gym/" + name + ".json");
  EXPECT_TRUE(in.good()) << name;
  return json::parse(in);
}

// Relative-plus-absolute 1e-6: observations are float32 values up to ~30.
void ExpectClose(double got, double want, const std::string& what) {
  EXPECT_LE(std::fabs(got - want), 1e-6 + 1e-6 * std::fabs(want))
      << what << ": got " << got << ", Gymnasium " << want;
}

std::unique_ptr<StatefulEnv> Make(const std::string& id) {
  auto env = MakeEnv(id);
  EXPECT_TRUE(env.ok());
  return std::unique_ptr<StatefulEnv>(dynamic_cast<StatefulEnv*>(env->release()));
}

// Encodes the recorded action the way VectorEnv passes it.
struct Action {
  int64_t discrete = 0;
  float box[8] = {};
  const void* ptr(bool is_discrete) const {
    return is_discrete ? static_cast<const void*>(&discrete) : static_cast<const void*>(box);
  }
};
Action ToAction(const json& a) {
  Action out;
  if (a.is_number_integer()) {
    out.discrete = a.get<int64_t>();
  } else {
    for (size_t i = 0; i < a.size(); ++i) out.box[i] = a[i].get<float>();
  }
  return out;
}

// Each step from Gymnasium's own state before it: dynamics, reward, termination.
void CheckStepwise(const std::string& fixture) {
  const json data = LoadFixture(fixture);  // kept alive: the loop walks into it
  ASSERT_FALSE(data["episodes"].empty());
  int checked = 0;
  for (const json& ep : data["episodes"]) {
    auto env = Make(ep["env"]);
    bool discrete = env->spec().action.is_discrete();
    std::vector<float> obs(env->spec().observation.flat_size());
    int t = 0;
    for (const json& st : ep["steps"]) {
      env->SetState(st["state"].get<std::vector<double>>());
      Action a = ToAction(st["action"]);
      StepOutcome r = env->Step(a.ptr(discrete), obs.data());
      std::string where = std::string(ep["env"]) + " seed " + std::to_string(int(ep["seed"])) +
                          " step " + std::to_string(t);
      for (size_t k = 0; k < obs.size(); ++k) ExpectClose(obs[k], st["obs"][k], where + " obs");
      ExpectClose(r.reward, st["reward"], where + " reward");
      EXPECT_EQ(r.terminated, st["terminated"].get<bool>()) << where;
      ++t;
      ++checked;
    }
  }
  EXPECT_GE(checked, 200) << "fixture steps compared";
}

// Whole episodes through LocalVectorEnv from the recorded start state only:
// accumulated error, the time limit (truncation) and episode statistics.
void CheckFreeRun(const std::string& fixture, double tolerance_scale) {
  const json data = LoadFixture(fixture);
  ASSERT_FALSE(data["episodes"].empty());
  for (const json& ep : data["episodes"]) {
    auto owned = Make(ep["env"]);
    StatefulEnv* env = owned.get();
    std::vector<std::unique_ptr<Env>> envs;
    envs.push_back(std::move(owned));
    LocalVectorEnv venv(std::move(envs), 0);
    std::vector<float> obs;
    ASSERT_TRUE(venv.Reset({}, &obs).ok());
    env->SetState(ep["start"].get<std::vector<double>>());
    bool discrete = venv.spec().action.is_discrete();
    StepOutput out;
    double total = 0;
    int t = 0;
    for (const json& st : ep["steps"]) {
      Action a = ToAction(st["action"]);
      ASSERT_TRUE(venv.Step(a.ptr(discrete), &out).ok());
      std::string where = std::string(ep["env"]) + " free run step " + std::to_string(t++);
      for (size_t k = 0; k < out.obs.size(); ++k) {
        double want = st["obs"][k];
        EXPECT_LE(std::fabs(out.obs[k] - want), tolerance_scale * (1e-6 + 1e-6 * std::fabs(want)))
            << where;
      }
      ExpectClose(out.reward[0], st["reward"], where + " reward");
      EXPECT_EQ(out.terminated[0] != 0, st["terminated"].get<bool>()) << where;
      EXPECT_EQ(out.truncated[0] != 0, st["truncated"].get<bool>()) << where;
      total += out.reward[0];
    }
    ASSERT_EQ(out.episodes.size(), 1u) << "the last step ends the episode";
    EXPECT_EQ(out.episodes[0].length, static_cast<int64_t>(ep["steps"].size()));
    EXPECT_NEAR(out.episodes[0].episode_return, total, 1e-9);
    // Next-step autoreset: the following step starts a new episode.
    Action zero;
    ASSERT_TRUE(venv.Step(zero.ptr(discrete), &out).ok());
    EXPECT_EQ(out.reset[0], 1);
    EXPECT_EQ(out.reward[0], 0);
    EXPECT_EQ(out.terminated[0] + out.truncated[0], 0);
  }
}

TEST(CartPoleTest, MatchesGymnasiumStepByStep) { CheckStepwise("cartpole"); }
TEST(CartPoleTest, MatchesGymnasiumOverWholeEpisodesIncludingTimeLimit) {
  CheckFreeRun("cartpole", 1.0);
}
TEST(PendulumTest, MatchesGymnasiumStepByStep) { CheckStepwise("pendulum"); }
TEST(PendulumTest, MatchesGymnasiumOverAWholeEpisode) { CheckFreeRun("pendulum", 1.0); }
TEST(AcrobotTest, MatchesGymnasiumStepByStep) { CheckStepwise("acrobot"); }
TEST(AcrobotTest, MatchesGymnasiumOverAWholeEpisode) { CheckFreeRun("acrobot", 1.0); }

TEST(ClassicControlTest, SeededResetsRepeatAndStayInGymnasiumsRanges) {
  for (const std::string id : {"CartPole-v1", "Pendulum-v1", "Acrobot-v1"}) {
    auto a = Make(id), b = Make(id);
    std::vector<float> oa(a->spec().observation.flat_size()), ob(oa.size());
    a->Reset(42, oa.data());
    b->Reset(42, ob.data());
    EXPECT_EQ(oa, ob) << id;
    b->Reset(43, ob.data());
    EXPECT_NE(oa, ob) << id;
    for (int i = 0; i < 200; ++i) {
      a->Reset(std::nullopt, oa.data());
      std::vector<double> s = a->GetState();
      double bound = id == "CartPole-v1" ? 0.05 : id == "Acrobot-v1" ? 0.1 : M_PI;
      for (size_t k = 0; k < s.size(); ++k) {
        double lim = (id == "Pendulum-v1" && k == 1) ? 1.0 : bound;
        EXPECT_LE(std::fabs(s[k]), lim) << id;
      }
    }
  }
}

}  // namespace
}  // namespace rlforge::sim
