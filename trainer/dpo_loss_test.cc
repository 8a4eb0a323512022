#include "trainer/dpo_loss.h"

#include <gtest/gtest.h>

#include <cmath>

namespace rlforge {
namespace {

torch::Tensor D(std::initializer_list<double> v) {
  return torch::tensor(std::vector<double>(v), torch::kFloat64);
}
double LogSigmoid(double x) { return -std::log1p(std::exp(-x)); }

TEST(DpoLossTest, SequenceLogprobsSumOrAverageOverTheMask) {
  auto logp = D({-1, -2, -3, -4, -5, -6}).reshape({2, 3});
  auto mask = D({1, 1, 0, 0, 1, 1}).reshape({2, 3});
  EXPECT_TRUE(torch::allclose(SequenceLogprobs(logp, mask).value(), D({-3, -11})));
  EXPECT_TRUE(torch::allclose(SequenceLogprobs(logp, mask, true).value(), D({-1.5, -5.5})));
  EXPECT_FALSE(SequenceLogprobs(logp, torch::ones({2, 2})).ok());
}

// Pair 0: policy log-ratios chosen +1, rejected -1 -> h = 2; pair 1: 0 and +1 -> h = -1.
DpoInput Pairs() {
  DpoInput in;
  in.chosen_logp = D({-1, -2}).requires_grad_(true);
  in.rejected_logp = D({-3, -1}).requires_grad_(true);
  in.ref_chosen_logp = D({-2, -2});
  in.ref_rejected_logp = D({-2, -2});
  return in;
}

TEST(DpoLossTest, SigmoidLossRewardsMarginsAndAccuracy) {
  auto in = Pairs();
  DpoOptions opt;
  opt.beta = 0.5;
  auto l = ComputeDpoLoss(in, opt).value();
  EXPECT_NEAR(l.loss.item<double>(), -(LogSigmoid(1.0) + LogSigmoid(-0.5)) / 2, 1e-12);
  EXPECT_TRUE(torch::allclose(l.chosen_rewards, D({0.5, 0})));
  EXPECT_TRUE(torch::allclose(l.rejected_rewards, D({-0.5, 0.5})));
  EXPECT_NEAR(l.chosen_reward, 0.25, 1e-12);
  EXPECT_NEAR(l.rejected_reward, 0.0, 1e-12);
  EXPECT_NEAR(l.margin, (1.0 - 0.5) / 2, 1e-12);
  EXPECT_NEAR(l.accuracy, 0.5, 1e-12);
  l.loss.backward();
  // d/dchosen -log sigmoid(beta h) = -beta (1 - sigmoid(beta h)), over the batch mean.
  double s = 1 / (1 + std::exp(-1.0));
  EXPECT_NEAR(in.chosen_logp.grad()[0].item<double>(), -0.5 * (1 - s) / 2, 1e-12);
  EXPECT_NEAR(in.rejected_logp.grad()[0].item<double>(), 0.5 * (1 - s) / 2, 1e-12);
}

TEST(DpoLossTest, LabelSmoothingMixesBothDirections) {
  DpoOptions opt;
  opt.beta = 0.5;
  opt.label_smoothing = 0.1;
  auto l = ComputeDpoLoss(Pairs(), opt).value();
  double p0 = -0.9 * LogSigmoid(1.0) - 0.1 * LogSigmoid(-1.0);
  double p1 = -0.9 * LogSigmoid(-0.5) - 0.1 * LogSigmoid(0.5);
  EXPECT_NEAR(l.losses[0].item<double>(), p0, 1e-12);
  EXPECT_NEAR(l.loss.item<double>(), (p0 + p1) / 2, 1e-12);
}

// IPO with beta 0.5: target margin 1 / (2 beta) = 1 -> (2 - 1)^2 and (-1 - 1)^2.
TEST(DpoLossTest, IpoLossIsSquaredDistanceToTheTargetMargin) {
  DpoOptions opt;
  opt.type = ParseChoice<DpoLossType>("ipo").value();
  opt.beta = 0.5;
  auto l = ComputeDpoLoss(Pairs(), opt).value();
  EXPECT_NEAR(l.loss.item<double>(), 2.5, 1e-12);
  EXPECT_FALSE(ParseChoice<DpoLossType>("hinge").ok());
}

TEST(DpoLossTest, InvalidOptionsAndShapesAreErrors) {
  DpoOptions opt;
  opt.beta = 0;
  EXPECT_FALSE(ComputeDpoLoss(Pairs(), opt).ok());
  opt.beta = 0.1;
  opt.label_smoothing = 0.5;
  EXPECT_FALSE(ComputeDpoLoss(Pairs(), opt).ok());
  opt.label_smoothing = 0;
  auto in = Pairs();
  in.ref_rejected_logp = D({1, 2, 3});
  auto bad = ComputeDpoLoss(in, opt);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("ref_rejected_logp"), std::string::npos);
}

TEST(DpoLossTest, ReferenceGetsNoGradient) {
  auto in = Pairs();
  in.ref_chosen_logp.requires_grad_(true);
  auto l = ComputeDpoLoss(in, DpoOptions{}).value();
  l.loss.backward();
  EXPECT_FALSE(in.ref_chosen_logp.grad().defined());
}

}  // namespace
}  // namespace rlforge
