#include "trainer/ppo_learner.h"

#include <gtest/gtest.h>

namespace rlforge {
namespace {

proto::PolicySpec BanditSpec() {
  proto::PolicySpec s;
  s.set_obs_size(2);
  s.set_discrete(true);
  s.set_action_size(2);
  return s;
}

JobConfig Config() {
  JobConfig c;
  c.job.algorithm = FindAlgorithm("ppo");
  c.policy.hidden_sizes = {16};
  c.trainer.lr = 3e-3;
  c.ppo.epochs = 4;
  c.ppo.minibatches = 4;
  return c;
}

// A contextual bandit: action 0 is good (A = +1), action 1 bad (A = -1). PPO
// must move probability toward action 0.
PpoBatch MakeBatch(PpoLearner& l) {
  torch::manual_seed(9);
  PpoBatch b;
  b.obs = torch::randn({256, 2});
  b.actions = torch::randint(0, 2, {256}, torch::kLong);
  torch::NoGradGuard g;
  auto out = l.model()->Forward(b.obs);
  b.logprobs = l.model()->LogProb(out, b.actions);
  b.values = out.value;
  b.advantages = 1 - 2 * b.actions.to(torch::kFloat32);
  b.returns = b.values + b.advantages;
  return b;
}

double ProbOfGoodAction(PpoLearner& l, const torch::Tensor& obs) {
  torch::NoGradGuard g;
  return torch::softmax(l.model()->Forward(obs).logits_or_mean, -1)
      .select(1, 0)
      .mean()
      .item<double>();
}

TEST(PpoLearnerTest, UpdatesTowardTheAdvantageousAction) {
  PpoLearner l(Config(), BanditSpec());
  auto probe = torch::randn({64, 2});
  double before = ProbOfGoodAction(l, probe);
  for (int it = 1; it <= 5; ++it) {
    auto m = l.Update(MakeBatch(l), it, 5);
    EXPECT_GE(m["approx_kl"], 0);
    EXPECT_LE(m["clipfrac"], 1);
  }
  EXPECT_EQ(l.version(), 5);
  EXPECT_GT(ProbOfGoodAction(l, probe), before + 0.2);
}

TEST(PpoLearnerTest, SameSeedSameUpdates) {
  PpoLearner a(Config(), BanditSpec()), b(Config(), BanditSpec());
  auto ma = a.Update(MakeBatch(a), 1, 2);
  auto mb = b.Update(MakeBatch(b), 1, 2);
  EXPECT_EQ(ma, mb);
}

TEST(PpoLearnerTest, LinearScheduleAnnealsTheLearningRate) {
  JobConfig c = Config();
  c.trainer.lr_schedule = "linear";
  PpoLearner l(c, BanditSpec());
  EXPECT_DOUBLE_EQ(l.Update(MakeBatch(l), 1, 4)["lr"], 3e-3);
  EXPECT_DOUBLE_EQ(l.Update(MakeBatch(l), 3, 4)["lr"], 3e-3 * 0.5);
}

TEST(PpoLearnerTest, TargetKlStopsEpochsEarly) {
  JobConfig c = Config();
  c.ppo.epochs = 50;
  c.ppo.target_kl = 1e-4;
  c.trainer.lr = 1e-2;
  PpoLearner l(c, BanditSpec());
  EXPECT_LT(l.Update(MakeBatch(l), 1, 1)["epochs"], 50);
}

// The fused (autograd-free) update and the autograd one, from the same init
// on the same batch: same minibatch order, advantage normalisation, clipping,
// optimizer steps, so parameters and metrics agree to rounding.
TEST(PpoLearnerTest, FusedUpdateAgreesWithAutograd) {
  for (bool discrete : {true, false}) {
    JobConfig c = Config();
    c.policy.hidden_sizes = {16, 8};
    c.ppo.ent_coef = 0.01;
    c.ppo.clip_value = 0.2;
    c.trainer.max_grad_norm = 0.5;
    JobConfig slow = c;
    slow.ppo.fused_update = false;
    proto::PolicySpec spec = BanditSpec();
    spec.set_discrete(discrete);
    PpoLearner fused(c, spec), autograd(slow, spec);
    ASSERT_TRUE(fused.fused());
    ASSERT_FALSE(autograd.fused());
    for (int it = 1; it <= 3; ++it) {
      PpoBatch b;
      if (discrete) {
        b = MakeBatch(fused);
      } else {
        torch::NoGradGuard g;
        b.obs = torch::randn({256, 2});
        b.actions = torch::randn({256, 2});
        auto out = fused.model()->Forward(b.obs);
        b.logprobs = fused.model()->LogProb(out, b.actions);
        b.values = out.value;
        b.advantages = b.actions.select(1, 0) - 0.3;
        b.returns = b.values + b.advantages;
      }
      auto mf = fused.Update(b, it, 3);
      auto ma = autograd.Update(b, it, 3);
      for (const char* k : {"policy_loss", "value_loss", "entropy", "approx_kl", "grad_norm"}) {
        EXPECT_NEAR(mf[k], ma[k], 1e-4 * std::max(1.0, std::abs(ma[k])))
            << k << " iteration " << it << (discrete ? " discrete" : " gaussian");
      }
      std::vector<float> pf(FlatSize(*fused.model())), pa(pf.size());
      FlattenInto(*fused.model(), pf.data());
      FlattenInto(*autograd.model(), pa.data());
      double worst = 0;
      for (size_t i = 0; i < pf.size(); ++i)
        worst = std::max(worst, double(std::abs(pf[i] - pa[i])));
      EXPECT_LT(worst, 1e-4) << "iteration " << it << (discrete ? " discrete" : " gaussian");
    }
  }
}

}  // namespace
}  // namespace rlforge
