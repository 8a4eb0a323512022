#include "models/actor_critic.h"

#include <gtest/gtest.h>

#include <cmath>

namespace rlforge {
namespace {

ActorCriticOptions Opts(bool discrete) {
  ActorCriticOptions o;
  o.obs_size = 3;
  o.discrete = discrete;
  o.action_size = 2;
  o.hidden_sizes = {8, 8};
  o.log_std_init = -0.5;
  return o;
}

TEST(ActorCriticTest, CategoricalLogProbAndEntropyMatchTheirDefinitions) {
  torch::manual_seed(0);
  ActorCritic m(Opts(true));
  auto obs = torch::randn({4, 3});
  auto out = m->Forward(obs);
  ASSERT_EQ(out.logits_or_mean.sizes(), (std::vector<int64_t>{4, 2}));
  ASSERT_EQ(out.value.sizes(), (std::vector<int64_t>{4}));
  auto actions = torch::tensor({0, 1, 1, 0}, torch::kLong);
  auto lp = m->LogProb(out, actions);
  auto ent = m->Entropy(out);
  for (int i = 0; i < 4; ++i) {
    double l0 = out.logits_or_mean[i][0].item<double>(),
           l1 = out.logits_or_mean[i][1].item<double>();
    double z = std::log(std::exp(l0) + std::exp(l1));
    double p0 = std::exp(l0 - z), p1 = std::exp(l1 - z);
    double want = actions[i].item<int64_t>() == 0 ? l0 - z : l1 - z;
    EXPECT_NEAR(lp[i].item<double>(), want, 1e-5);
    EXPECT_NEAR(ent[i].item<double>(), -(p0 * std::log(p0) + p1 * std::log(p1)), 1e-5);
  }
}

TEST(ActorCriticTest, GaussianLogProbAndEntropyMatchTheClosedForm) {
  torch::manual_seed(1);
  ActorCritic m(Opts(false));
  auto obs = torch::randn({2, 3});
  auto out = m->Forward(obs);
  auto a = torch::tensor({{0.3f, -1.0f}, {2.0f, 0.1f}});
  auto lp = m->LogProb(out, a);
  double s = std::exp(-0.5);
  for (int i = 0; i < 2; ++i) {
    double want = 0;
    for (int k = 0; k < 2; ++k) {
      double d = a[i][k].item<double>() - out.logits_or_mean[i][k].item<double>();
      want += -d * d / (2 * s * s) - std::log(s) - 0.5 * std::log(2 * M_PI);
    }
    EXPECT_NEAR(lp[i].item<double>(), want, 1e-5);
  }
  EXPECT_NEAR(m->Entropy(out)[0].item<double>(), 2 * (0.5 + 0.5 * std::log(2 * M_PI) - 0.5), 1e-5);
}

TEST(ActorCriticTest, OrthogonalInitGainsAndZeroBiases) {
  torch::manual_seed(2);
  ActorCriticOptions o = Opts(true);
  o.obs_size = 8;
  ActorCritic m(o);
  for (const auto& p : m->named_parameters()) {
    if (p.key().find("bias") != std::string::npos) {
      EXPECT_EQ(p.value().abs().sum().item<double>(), 0.0) << p.key();
    }
  }
  // actor.0: 8x8 hidden layer with gain sqrt(2): W W^T = 2 I.
  auto w = m->named_parameters()["actor.0.weight"];
  EXPECT_TRUE(torch::allclose(w.mm(w.t()), 2 * torch::eye(8), 1e-4, 1e-4));
  // The policy head (gain 0.01) starts near uniform.
  EXPECT_LT(m->named_parameters()["actor.4.weight"].abs().max().item<double>(), 0.02);
}

TEST(ActorCriticTest, FlatWeightsRoundTripAndLayoutHashTracksShapes) {
  torch::manual_seed(3);
  ActorCritic a(Opts(false));
  torch::manual_seed(4);
  ActorCritic b(Opts(false));
  auto obs = torch::randn({5, 3});
  EXPECT_FALSE(torch::equal(a->Forward(obs).value, b->Forward(obs).value));
  std::vector<float> flat(FlatSize(*a));
  FlattenInto(*a, flat.data());
  LoadFlat(*b, flat.data());
  EXPECT_TRUE(torch::equal(a->Forward(obs).value, b->Forward(obs).value));
  EXPECT_TRUE(torch::equal(a->Forward(obs).logits_or_mean, b->Forward(obs).logits_or_mean));
  EXPECT_EQ(LayoutHash(*a), LayoutHash(*b));
  ActorCriticOptions wider = Opts(false);
  wider.hidden_sizes = {8, 9};
  ActorCritic c(wider);
  EXPECT_NE(LayoutHash(*a), LayoutHash(*c));
}

TEST(ActorCriticTest, ObservationStatisticsMergeLikeOneBigBatch) {
  ActorCriticOptions o = Opts(true);
  o.normalize_obs = true;
  ActorCritic m(o);
  torch::manual_seed(5);
  auto x1 = torch::randn({50, 3}) * 3 + 1, x2 = torch::randn({70, 3}) - 2;
  m->UpdateObsStats(x1);
  m->UpdateObsStats(x2);
  auto all = torch::cat({x1, x2}).to(torch::kFloat64);
  auto bufs = m->named_buffers();
  EXPECT_TRUE(torch::allclose(bufs["obs_mean"], all.mean(0), 1e-4, 1e-4));
  EXPECT_TRUE(torch::allclose(bufs["obs_var"], all.var(0, false), 1e-3, 1e-3));
  // Normalised inputs: a holder of the flat weights computes the same outputs.
  ActorCritic n(o);
  std::vector<float> flat(FlatSize(*m));
  FlattenInto(*m, flat.data());
  LoadFlat(*n, flat.data());
  auto probe = torch::randn({4, 3});
  EXPECT_TRUE(torch::equal(m->Forward(probe).value, n->Forward(probe).value));
}

}  // namespace
}  // namespace rlforge
