#include "trainer/ppo_learner.h"

#include <gtest/gtest.h>

#include "trainer/ppo_trainer_role.h"

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
  c.trainer.lr_schedule = LrSchedule::kLinear;
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

// The ratio PPO clips is pi / pi_behaviour with the logprobs recorded at stepping time: 1 bit
// for bit while the trainer holds the version that stepped the batch, exp(new - recorded)
// once it has moved on (a stale batch under rollout.max_staleness).
TEST(PpoLearnerTest, ImportanceWeightsAreExactlyOneForTheVersionThatStepped) {
  JobConfig c = Config();
  c.rollout.max_staleness = 1;
  PpoLearner l(c, BanditSpec());
  PpoBatch b = MakeBatch(l);
  const torch::Tensor w = l.ImportanceWeights(b);
  EXPECT_TRUE(torch::equal(w, torch::ones_like(w)));
  auto m = l.Update(b, 1, 2);
  EXPECT_EQ(m.at("is_weight_mean"), 1.0);
  EXPECT_EQ(m.at("is_weight_max"), 1.0);
  EXPECT_EQ(m.at("is_outside_clip"), 0.0);
  // One version later the same batch is stale: weights by the recorded logprobs, not 1.
  torch::Tensor now;
  {
    torch::NoGradGuard g;
    now = l.model()->LogProb(l.model()->Forward(b.obs), b.actions);
  }
  const torch::Tensor stale = l.ImportanceWeights(b);
  EXPECT_TRUE(torch::allclose(stale, (now - b.logprobs).exp()));
  EXPECT_GT((stale - 1).abs().max().item<double>(), 1e-3);
  auto m2 = l.Update(b, 2, 2);
  EXPECT_DOUBLE_EQ(m2.at("is_weight_mean"), stale.mean().item<double>());
  EXPECT_DOUBLE_EQ(m2.at("is_weight_max"), stale.max().item<double>());
}

TEST(PpoLearnerTest, SynchronousUpdatesReportNoImportanceWeights) {
  PpoLearner l(Config(), BanditSpec());
  EXPECT_FALSE(l.Update(MakeBatch(l), 1, 2).contains("is_weight_mean"));
}

// The trainer takes a batch whose oldest behaviour version is within rollout.max_staleness of
// its own, and names the versions and the bound otherwise.
TEST(PpoTrainerRoleTest, RefusesABatchOutsideTheStalenessBound) {
  for (int64_t k : {0, 2}) {
    JobConfig c = Config();
    c.rollout.max_staleness = k;
    PpoTrainerRole role(c, proto::Assignment());
    proto::WorkRequest init;
    *init.mutable_train_init()->mutable_spec() = BanditSpec();
    init.mutable_train_init()->set_weights_transport("zmq");
    ASSERT_TRUE(role.Handle(init, {}).ok());
    PpoLearner probe(c, BanditSpec());
    const PpoBatch b = MakeBatch(probe);
    auto step = [&](int64_t behaviour) {
      proto::WorkRequest req;
      req.mutable_train_step()->set_iteration(1);
      req.mutable_train_step()->set_num_iterations(4);
      req.mutable_train_step()->set_behavior_version(behaviour);
      std::vector<TensorFrame> t;
      t.push_back(TensorFrame::Copy("obs", proto::F32, {256, 2}, b.obs.data_ptr<float>()));
      t.push_back(TensorFrame::Copy("actions", proto::I64, {256}, b.actions.data_ptr<int64_t>()));
      for (const auto& [name, x] : {std::pair{"logprobs", b.logprobs},
                                    {"values", b.values},
                                    {"advantages", b.advantages},
                                    {"returns", b.returns}}) {
        torch::Tensor f = x.contiguous();
        t.push_back(TensorFrame::Copy(name, proto::F32, {256}, f.data_ptr<float>()));
      }
      return role.Handle(req, std::move(t));
    };
    auto ahead = step(1);
    ASSERT_FALSE(ahead.ok());
    EXPECT_NE(ahead.status().message().find("policy version 1 but the trainer holds version 0"),
              std::string::npos)
        << ahead.status();
    ASSERT_TRUE(step(0).ok()) << "k = " << k;
    if (k == 0) {
      auto old = step(0);
      ASSERT_FALSE(old.ok());
      EXPECT_NE(old.status().message().find("(synchronous PPO allows no lag)"), std::string::npos)
          << old.status();
      continue;
    }
    ASSERT_TRUE(step(0).ok()) << "lag 1";  // trainer at 1
    ASSERT_TRUE(step(0).ok()) << "lag 2";  // trainer at 2
    auto old = step(0);                    // trainer at 3: lag 3
    ASSERT_FALSE(old.ok());
    EXPECT_EQ(old.status().message(),
              "batch was collected by policy version 0 but the trainer holds version 3 "
              "(rollout.max_staleness allows a lag of 0 to 2)");
  }
}

}  // namespace
}  // namespace rlforge
