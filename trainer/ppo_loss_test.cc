#include "trainer/ppo_loss.h"

#include <gtest/gtest.h>

#include <cmath>

namespace rlforge {
namespace {

// ratio = [1.5, 0.5, 1.1], advantages = [1, 1, -2], clip 0.2:
//   per-sample max(-A r, -A clip(r)) = [-1.2, -0.5, 2.2] -> mean 0.5/3
//   clipped: |r - 1| > 0.2 for the first two -> clipfrac 2/3
//   approx KL = mean((r - 1) - log r)
TEST(PpoLossTest, ClippedSurrogateMatchesHandComputation) {
  auto new_logp = torch::log(torch::tensor({1.5f, 0.5f, 1.1f}));
  auto old_logp = torch::zeros({3});
  auto adv = torch::tensor({1.f, 1.f, -2.f});
  PolicyLoss l = ClippedPolicyLoss(new_logp, old_logp, adv, 0.2);
  EXPECT_NEAR(l.loss.item<double>(), 0.5 / 3, 1e-6);
  EXPECT_NEAR(l.clipfrac, 2.0 / 3, 1e-6);
  double kl = ((0.5 - std::log(1.5)) + (-0.5 - std::log(0.5)) + (0.1 - std::log(1.1))) / 3;
  EXPECT_NEAR(l.approx_kl, kl, 1e-6);
}

TEST(PpoLossTest, GradientVanishesWhereTheRatioIsClipped) {
  auto new_logp = torch::log(torch::tensor({1.5f, 1.0f})).requires_grad_(true);
  auto l = ClippedPolicyLoss(new_logp, torch::zeros({2}), torch::tensor({1.f, 1.f}), 0.2);
  l.loss.backward();
  EXPECT_EQ(new_logp.grad()[0].item<float>(), 0.f);
  EXPECT_NEAR(new_logp.grad()[1].item<float>(), -0.5f, 1e-6);  // -A * r / n
}

// new [1, 2], old [0, 3], returns [1.5, 1], clip 0.5:
//   unclipped squared errors [0.25, 1]; clipped values [0.5, 2.5] -> [1, 2.25]
//   clipped loss 0.5 * mean(max) = 0.5 * 1.625; unclipped 0.5 * 0.625
TEST(PpoLossTest, ValueLossClippedAndUnclipped) {
  auto nv = torch::tensor({1.f, 2.f}), ov = torch::tensor({0.f, 3.f}),
       r = torch::tensor({1.5f, 1.f});
  EXPECT_NEAR(ValueLoss(nv, ov, r, 0.5).item<double>(), 0.8125, 1e-6);
  EXPECT_NEAR(ValueLoss(nv, ov, r, 0.0).item<double>(), 0.3125, 1e-6);
}

TEST(PpoLossTest, AdvantageNormalisationAndExplainedVariance) {
  auto a = NormalizeAdvantages(torch::tensor({1.f, 2.f, 3.f}));
  EXPECT_NEAR(a.mean().item<double>(), 0, 1e-6);
  EXPECT_NEAR(a.std().item<double>(), 1, 1e-4);
  auto ret = torch::tensor({1.f, 2.f, 3.f});
  EXPECT_NEAR(ExplainedVariance(ret, ret), 1.0, 1e-9);
  EXPECT_NEAR(ExplainedVariance(torch::zeros({3}), ret), 0.0, 1e-9);
}

}  // namespace
}  // namespace rlforge
