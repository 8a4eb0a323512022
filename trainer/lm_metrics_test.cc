#include "trainer/lm_metrics.h"

#include <gtest/gtest.h>

#include <cmath>

namespace rlforge {
namespace {

torch::Tensor D(std::initializer_list<double> v, int64_t rows = 1) {
  return torch::tensor(std::vector<double>(v), torch::kFloat64).reshape({rows, -1});
}

TEST(LmMetricsTest, ChunkedTokenLogprobsEqualLogSoftmaxGather) {
  torch::manual_seed(0);
  auto logits = torch::randn({3, 5, 17}, torch::kFloat64);
  auto targets = torch::randint(0, 17, {3, 5}, torch::kLong);
  auto ref = torch::log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1);
  for (int64_t chunk : {1, 4, 15, 1000}) {
    auto got = TokenLogprobs(logits, targets, chunk).value();
    EXPECT_TRUE(torch::allclose(got, ref, 1e-12, 1e-12)) << "chunk " << chunk;
  }
}

TEST(LmMetricsTest, ChunkedTokenLogprobsGradientEqualsReference) {
  torch::manual_seed(1);
  auto logits = torch::randn({2, 4, 9}, torch::kFloat64).requires_grad_(true);
  auto targets = torch::randint(0, 9, {2, 4}, torch::kLong);
  auto w = torch::randn({2, 4}, torch::kFloat64);
  (TokenLogprobs(logits, targets, 3).value() * w).sum().backward();
  auto got = logits.grad().clone();
  logits.grad().zero_();
  (torch::log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1) * w)
      .sum()
      .backward();
  EXPECT_TRUE(torch::allclose(got, logits.grad(), 1e-12, 1e-12));
}

TEST(LmMetricsTest, BFloat16LogitsAreReducedInFloat32) {
  torch::manual_seed(2);
  auto logits = torch::randn({2, 3, 50}).to(torch::kBFloat16);
  auto targets = torch::randint(0, 50, {2, 3}, torch::kLong);
  auto got = TokenLogprobs(logits, targets, 2).value();
  EXPECT_EQ(got.scalar_type(), torch::kFloat32);
  auto ref = torch::log_softmax(logits.to(torch::kFloat32), -1)
                 .gather(-1, targets.unsqueeze(-1))
                 .squeeze(-1);
  EXPECT_TRUE(torch::allclose(got, ref, 1e-5, 1e-5));
}

TEST(LmMetricsTest, BFloat16GradientMatchesFloat32Reference) {
  torch::manual_seed(4);
  auto logits = torch::randn({2, 3, 40}).to(torch::kBFloat16).requires_grad_(true);
  auto targets = torch::randint(0, 40, {2, 3}, torch::kLong);
  TokenLogprobs(logits, targets, 4).value().sum().backward();
  ASSERT_EQ(logits.grad().scalar_type(), torch::kBFloat16);
  auto ref = logits.detach().to(torch::kFloat32).requires_grad_(true);
  torch::log_softmax(ref, -1).gather(-1, targets.unsqueeze(-1)).sum().backward();
  EXPECT_TRUE(torch::allclose(logits.grad().to(torch::kFloat32), ref.grad(), 1e-2, 1e-2));
}

TEST(LmMetricsTest, TokenLogprobsOfAnEmptyBatch) {
  auto logits = torch::zeros({0, 3, 5}, torch::requires_grad());
  auto out = TokenLogprobs(logits, torch::zeros({0, 3}, torch::kLong)).value();
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{0, 3}));
}

TEST(LmMetricsTest, TokenLogprobsRejectsBadTargets) {
  auto logits = torch::zeros({1, 2, 4});
  auto bad = TokenLogprobs(logits, torch::tensor({{0, 4}}, torch::kLong));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("[0, 4)"), std::string::npos);
  EXPECT_FALSE(TokenLogprobs(logits, torch::zeros({1, 3}, torch::kLong)).ok());
  EXPECT_FALSE(TokenLogprobs(logits, torch::zeros({1, 2})).ok());  // float ids
}

// p = [0.5, 0.25, 0.25]: H = 0.5 log 2 + 2 * 0.25 log 4 = 1.5 log 2; uniform over 4: log 4.
TEST(LmMetricsTest, EntropyMatchesHandComputation) {
  auto logits = torch::stack({torch::log(D({0.5, 0.25, 0.25, 1e-300})).squeeze(0),
                              D({3, 3, 3, 3}).squeeze(0)})
                    .reshape({1, 2, 4});
  torch::NoGradGuard no_grad;
  for (int64_t chunk : {1, 2}) {
    auto h = TokenEntropy(logits, chunk).value();
    EXPECT_NEAR(h[0][0].item<double>(), 1.5 * std::log(2.0), 1e-9);
    EXPECT_NEAR(h[0][1].item<double>(), std::log(4.0), 1e-12);
  }
}

// rollout [-1, -2, -3], trainer [-1.1, -2, -2.5], the last token masked out:
//   |diff| = [0.1, 0] -> mean 0.05, max 0.1; k3 = mean(e^d - 1 - d), d = [-0.1, 0].
TEST(LmMetricsTest, LogprobMismatchOverTheMask) {
  auto m = ComputeLogprobMismatch(D({-1, -2, -3}), D({-1.1, -2, -2.5}), D({1, 1, 0})).value();
  EXPECT_NEAR(m.mean_abs, 0.05, 1e-12);
  EXPECT_NEAR(m.max_abs, 0.1, 1e-12);
  EXPECT_NEAR(m.k3, (std::exp(-0.1) - 1 + 0.1) / 2, 1e-12);
  EXPECT_FALSE(ComputeLogprobMismatch(D({-1, -2}), D({-1, -2, -3}), D({1, 1, 0})).ok());
}

TEST(LmMetricsTest, ClipFractionsAndApproxKl) {
  auto logp = torch::log(D({1.5, 0.7, 0.7, 1.1}, 2));
  auto old = torch::zeros({2, 2}, torch::kFloat64);
  auto adv = D({1, -1}).reshape({2});
  auto mask = torch::ones({2, 2}, torch::kFloat64);
  auto f = ComputeClipFractions(logp, old, adv, mask, 0.2, 0.2, 0).value();
  // (0,0): A>0, r>1.2 -> high; (0,1): A>0, r<0.8 -> no clip region; (1,0): A<0, r<0.8 -> low.
  EXPECT_NEAR(f.high, 0.25, 1e-12);
  EXPECT_NEAR(f.low, 0.25, 1e-12);
  double kl = 0;
  for (double r : {1.5, 0.7, 0.7, 1.1}) kl += (r - 1 - std::log(r)) / 4;
  EXPECT_NEAR(ApproxKl(logp, old, mask).value(), kl, 1e-12);
}

}  // namespace
}  // namespace rlforge
