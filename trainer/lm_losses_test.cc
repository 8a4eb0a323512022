#include "trainer/lm_losses.h"

#include <gtest/gtest.h>

#include <cmath>

#include "trainer/lm_metrics.h"

namespace rlforge {
namespace {

torch::Tensor D(std::initializer_list<double> v) {
  return torch::tensor(std::vector<double>(v), torch::kFloat64);
}
torch::Tensor D2(std::initializer_list<double> v, int64_t rows) { return D(v).reshape({rows, -1}); }
double Scalar(const absl::StatusOr<torch::Tensor>& t) { return t.value().item<double>(); }

// per_token [[1, 2, 3], [4, 5, 6]], mask [[1, 1, 0], [1, 0, 0]]:
//   token-mean (1 + 2 + 4) / 3; seq-mean-token-sum (3 + 4) / 2;
//   seq-mean-token-mean (1.5 + 4) / 2; sum-norm 7 / (2 * T) or 7 / (2 * 4).
TEST(LmLossesTest, AggregationModesMatchHandComputation) {
  auto l = D2({1, 2, 3, 4, 5, 6}, 2), m = D2({1, 1, 0, 1, 0, 0}, 2);
  EXPECT_NEAR(Scalar(AggregateLoss(l, m, LossAggregation::kTokenMean)), 7.0 / 3, 1e-12);
  EXPECT_NEAR(Scalar(AggregateLoss(l, m, LossAggregation::kSeqMeanTokenSum)), 3.5, 1e-12);
  EXPECT_NEAR(Scalar(AggregateLoss(l, m, LossAggregation::kSeqMeanTokenMean)), 2.75, 1e-12);
  EXPECT_NEAR(Scalar(AggregateLoss(l, m, LossAggregation::kSeqMeanTokenSumNorm)), 7.0 / 6, 1e-12);
  EXPECT_NEAR(Scalar(AggregateLoss(l, m, LossAggregation::kSeqMeanTokenSumNorm, 4)), 7.0 / 8,
              1e-12);
}

TEST(LmLossesTest, EmptyMaskAndInfinitePaddingGiveFiniteZero) {
  auto l = D2({1, INFINITY, -INFINITY, 2}, 2), m = D2({0, 0, 0, 0}, 2);
  for (auto agg : {LossAggregation::kTokenMean, LossAggregation::kSeqMeanTokenSum,
                   LossAggregation::kSeqMeanTokenMean, LossAggregation::kSeqMeanTokenSumNorm}) {
    EXPECT_EQ(Scalar(AggregateLoss(l, m, agg)), 0.0) << ChoiceName(agg);
  }
}

TEST(LmLossesTest, AggregationNamesRoundTripAndUnknownNamesAreErrors) {
  for (auto agg : {LossAggregation::kTokenMean, LossAggregation::kSeqMeanTokenSum,
                   LossAggregation::kSeqMeanTokenMean, LossAggregation::kSeqMeanTokenSumNorm}) {
    EXPECT_EQ(ParseChoice<LossAggregation>(ChoiceName(agg)).value(), agg);
  }
  auto bad = ParseChoice<LossAggregation>("token_mean");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'token_mean'"), std::string::npos);
  EXPECT_EQ(ParseChoice<KlEstimator>("k2").value(), KlEstimator::kK2);
  EXPECT_FALSE(ParseChoice<KlEstimator>("k4").ok());
}

TEST(LmLossesTest, ShapeMismatchNamesTheArgument) {
  auto r = AggregateLoss(torch::zeros({2, 3}), torch::zeros({2, 4}), LossAggregation::kTokenMean);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("mask"), std::string::npos);
}

// Group 0 rewards [1, 0, 0, 1]: mean 0.5, unbiased std sqrt(1/3), biased std 0.5.
// Group 1 rewards [2, 2, 2, 2]: degenerate, advantage 0, filtered.
TEST(LmLossesTest, GroupAdvantagesNormaliseAndFlagEqualGroups) {
  auto rewards = D({1, 0, 0, 1, 2, 2, 2, 2});
  GroupAdvantageOptions opt;
  opt.group_size = 4;
  opt.std_eps = 0;
  auto a = ComputeGroupAdvantages(rewards, opt).value();
  double z = 0.5 / std::sqrt(1.0 / 3);
  auto expect = D({z, -z, -z, z, 0, 0, 0, 0});
  EXPECT_TRUE(torch::allclose(a.advantages, expect, 1e-12, 1e-12)) << a.advantages;
  EXPECT_EQ(a.num_groups, 2);
  EXPECT_EQ(a.num_degenerate, 1);
  EXPECT_TRUE(a.degenerate[1].item<bool>());
  EXPECT_TRUE(torch::equal(a.kept_indices, torch::arange(4, torch::kLong)));

  opt.unbiased_std = false;
  a = ComputeGroupAdvantages(rewards, opt).value();
  EXPECT_NEAR(a.advantages[0].item<double>(), 1.0, 1e-12);

  opt.scale_by_std = false;  // Dr.GRPO
  a = ComputeGroupAdvantages(rewards, opt).value();
  EXPECT_TRUE(torch::allclose(a.advantages, D({0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0})));
}

TEST(LmLossesTest, GroupAdvantagesToleranceAndErrors) {
  GroupAdvantageOptions opt;
  opt.group_size = 2;
  opt.equal_tolerance = 0.01;
  auto a = ComputeGroupAdvantages(D({1, 1.005, 0, 1}), opt).value();
  EXPECT_EQ(a.num_degenerate, 1);
  EXPECT_EQ(a.advantages[0].item<double>(), 0.0);
  EXPECT_TRUE(torch::equal(a.kept_indices, torch::tensor({2, 3}, torch::kLong)));

  opt.group_size = 4;
  auto bad = ComputeGroupAdvantages(D({1, 2, 3, 4, 5, 6, 7}), opt);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("not a multiple of group_size 4"), std::string::npos);
  opt.group_size = 0;
  EXPECT_FALSE(ComputeGroupAdvantages(D({1}), opt).ok());
}

// logp = log 0.5, ref = log 0.25: d = ref - logp = -log 2.
TEST(LmLossesTest, KlEstimatorsMatchHandComputation) {
  auto logp = D2({std::log(0.5)}, 1), ref = D2({std::log(0.25)}, 1);
  double l2 = std::log(2.0);
  EXPECT_NEAR(Scalar(KlPenalty(logp, ref, KlEstimator::kK1)), l2, 1e-12);
  EXPECT_NEAR(Scalar(KlPenalty(logp, ref, KlEstimator::kK2)), 0.5 * l2 * l2, 1e-12);
  EXPECT_NEAR(Scalar(KlPenalty(logp, ref, KlEstimator::kK3)), 0.5 + l2 - 1, 1e-12);
}

TEST(LmLossesTest, KlFoldedIntoSequenceRewards) {
  auto kl = D2({0.1, 0.2, 0.3, 0.4}, 2), mask = D2({1, 1, 1, 0}, 2);
  auto r = KlPenalizedRewards(D({1, 2}), kl, mask, 0.5).value();
  EXPECT_TRUE(torch::allclose(r, D({1 - 0.5 * 0.3, 2 - 0.5 * 0.3}), 1e-12, 1e-12)) << r;
}

// Two sequences, A = [1, -1], ratios [[1.5, 0.9], [0.5, 4.0]], clip_low 0.2, clip_high 0.28:
//   (0,0): max(-1.5, -1.28) = -1.28 (high-clipped)   (0,1): -0.9
//   (1,0): max(0.5, 0.8) = 0.8 (low-clipped)        (1,1): max(4, 1.28) = 4; dual c=3 -> 3
LmPolicyLossInput ClipCase() {
  LmPolicyLossInput in;
  in.logp = D2({std::log(1.5), std::log(0.9), std::log(0.5), std::log(4.0)}, 2);
  in.logp.requires_grad_(true);
  in.old_logp = torch::zeros({2, 2}, torch::kFloat64);
  in.advantages = D({1, -1});
  in.mask = torch::ones({2, 2}, torch::kFloat64);
  return in;
}

TEST(LmLossesTest, ClipHigherBoundsMatchHandComputation) {
  auto in = ClipCase();
  LmPolicyLossOptions opt;
  opt.clip.clip_high = 0.28;
  auto l = ComputeLmPolicyLoss(in, opt).value();
  EXPECT_NEAR(l.loss.item<double>(), (-1.28 - 0.9 + 0.8 + 4) / 4, 1e-12);
  EXPECT_NEAR(l.pg_loss, l.loss.item<double>(), 1e-12);
  EXPECT_NEAR(l.clipfrac_high, 0.25, 1e-12);
  EXPECT_NEAR(l.clipfrac_low, 0.25, 1e-12);
  EXPECT_EQ(l.clipfrac_dual, 0.0);
  double kl = 0;
  for (double r : {1.5, 0.9, 0.5, 4.0}) kl += (r - 1 - std::log(r)) / 4;
  EXPECT_NEAR(l.approx_kl, kl, 1e-12);
  EXPECT_NEAR(l.ratio_mean, (1.5 + 0.9 + 0.5 + 4.0) / 4, 1e-12);
  l.loss.backward();
  // d/dlogp of -A r / 4 = -A r / 4 where unclipped, 0 where clipped.
  auto g = in.logp.grad();
  EXPECT_TRUE(torch::allclose(g, D2({0, -0.9 / 4, 0, 4.0 / 4}, 2), 1e-12, 1e-12)) << g;
}

// ClipCase with rollout logprobs such that w = pi_prox / pi_behav = [[1, 3], [0.4, 1.5]]
// (old_logp, the proximal policy, is 0): cap 2 truncates or drops the 3, mask drops 0.4 too.
LmPolicyLossInput OffPolicyCase() {
  auto in = ClipCase();
  in.behaviour_logp = -torch::log(D2({1, 3, 0.4, 1.5}, 2));
  return in;
}

TEST(LmLossesTest, TruncatedIsWeightsTokensByTheCappedRatio) {
  auto in = OffPolicyCase();
  LmPolicyLossOptions opt;
  opt.clip.clip_high = 0.28;
  opt.correction = OffPolicyCorrection::kTruncatedIs;
  opt.is_cap = 2;
  auto l = ComputeLmPolicyLoss(in, opt).value();
  // pg [[-1.28, -0.9], [0.8, 4]] x min(w, 2) [[1, 2], [0.4, 1.5]].
  EXPECT_NEAR(l.loss.item<double>(), (-1.28 - 1.8 + 0.32 + 6) / 4, 1e-12);
  EXPECT_NEAR(l.is_weight_mean, (1 + 3 + 0.4 + 1.5) / 4, 1e-12);
  EXPECT_NEAR(l.is_weight_max, 3, 1e-12);
  EXPECT_NEAR(l.is_corrected_fraction, 0.25, 1e-12);
  l.loss.backward();
  EXPECT_TRUE(torch::allclose(in.logp.grad(), D2({0, -1.8 / 4, 0, 6.0 / 4}, 2), 1e-12, 1e-12))
      << in.logp.grad();
}

TEST(LmLossesTest, DecoupledPpoWeightsByProximalOverBehaviourAndZeroesAboveTheCap) {
  auto in = OffPolicyCase();
  LmPolicyLossOptions opt;
  opt.clip.clip_high = 0.28;
  opt.correction = OffPolicyCorrection::kDecoupled;
  opt.is_cap = 2;
  auto l = ComputeLmPolicyLoss(in, opt).value();
  // Token (0, 1) (w = 3) gets weight 0 and stays in the token count (AReaL's normaliser).
  EXPECT_NEAR(l.loss.item<double>(), (-1.28 + 0 + 0.32 + 6) / 4, 1e-12);
  EXPECT_NEAR(l.is_corrected_fraction, 0.25, 1e-12);
  l.loss.backward();
  EXPECT_TRUE(torch::allclose(in.logp.grad(), D2({0, 0, 0, 6.0 / 4}, 2), 1e-12, 1e-12))
      << in.logp.grad();
}

TEST(LmLossesTest, MaskZeroesTokensOutsideTheBandAndKeepsTheOthersUnweighted) {
  auto in = OffPolicyCase();
  LmPolicyLossOptions opt;
  opt.clip.clip_high = 0.28;
  opt.correction = OffPolicyCorrection::kMask;
  opt.is_cap = 2;
  auto l = ComputeLmPolicyLoss(in, opt).value();
  // w = 3 and w = 0.4 fall outside [0.5, 2]: weight 0, still counted.
  EXPECT_NEAR(l.loss.item<double>(), (-1.28 + 4) / 4, 1e-12);
  EXPECT_NEAR(l.is_corrected_fraction, 0.5, 1e-12);
}

TEST(LmLossesTest, ImportanceWeightsAreExactlyOneWhenRolloutAndTrainerAgree) {
  auto plain_in = ClipCase();
  LmPolicyLossOptions plain;
  plain.clip.clip_high = 0.28;
  auto expect = ComputeLmPolicyLoss(plain_in, plain).value();
  expect.loss.backward();
  for (auto c : {OffPolicyCorrection::kDecoupled, OffPolicyCorrection::kTruncatedIs,
                 OffPolicyCorrection::kMask}) {
    auto in = ClipCase();
    in.behaviour_logp = in.old_logp.clone();
    LmPolicyLossOptions opt = plain;
    opt.correction = c;
    auto l = ComputeLmPolicyLoss(in, opt).value();
    EXPECT_EQ(l.is_weight_mean, 1.0);
    EXPECT_EQ(l.is_weight_max, 1.0);
    EXPECT_EQ(l.is_corrected_fraction, 0.0);
    EXPECT_EQ(l.loss.item<double>(), expect.loss.item<double>());
    l.loss.backward();
    EXPECT_TRUE(torch::equal(in.logp.grad(), plain_in.logp.grad()));
  }
}

TEST(LmLossesTest, OffPolicyCorrectionNamesAndErrors) {
  EXPECT_EQ(ParseChoice<OffPolicyCorrection>("tis").value(), OffPolicyCorrection::kTruncatedIs);
  EXPECT_EQ(ParseChoice<OffPolicyCorrection>("decoupled").value(), OffPolicyCorrection::kDecoupled);
  EXPECT_EQ(ParseChoice<OffPolicyCorrection>("mask").value(), OffPolicyCorrection::kMask);
  EXPECT_EQ(ParseChoice<OffPolicyCorrection>("none").value(), OffPolicyCorrection::kNone);
  EXPECT_FALSE(ParseChoice<OffPolicyCorrection>("is").ok());
  auto in = ClipCase();
  LmPolicyLossOptions opt;
  opt.correction = OffPolicyCorrection::kTruncatedIs;
  auto missing = ComputeLmPolicyLoss(in, opt);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("behaviour_logp"), std::string::npos);
  in.behaviour_logp = in.old_logp.clone();
  opt.is_cap = 1;
  auto bad = ComputeLmPolicyLoss(in, opt);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("is_cap"), std::string::npos);
}

TEST(LmLossesTest, DualClipCapsNegativeAdvantageLoss) {
  auto in = ClipCase();
  LmPolicyLossOptions opt;
  opt.clip.clip_high = 0.28;
  opt.clip.dual_clip = 3;
  auto l = ComputeLmPolicyLoss(in, opt).value();
  EXPECT_NEAR(l.loss.item<double>(), (-1.28 - 0.9 + 0.8 + 3) / 4, 1e-12);
  EXPECT_NEAR(l.clipfrac_dual, 0.25, 1e-12);
  l.loss.backward();
  EXPECT_EQ(in.logp.grad()[1][1].item<double>(), 0.0);

  opt.clip.dual_clip = 0.5;
  auto bad = ComputeLmPolicyLoss(in, opt);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("dual_clip"), std::string::npos);
}

TEST(LmLossesTest, MaskAndAggregationApplyToThePolicyLoss) {
  auto in = ClipCase();
  in.mask = D2({1, 1, 1, 0}, 2);
  LmPolicyLossOptions opt;
  opt.clip.clip_high = 0.28;
  EXPECT_NEAR(ComputeLmPolicyLoss(in, opt).value().loss.item<double>(), (-1.28 - 0.9 + 0.8) / 3,
              1e-12);
  opt.aggregation = LossAggregation::kSeqMeanTokenMean;
  EXPECT_NEAR(ComputeLmPolicyLoss(in, opt).value().loss.item<double>(),
              ((-1.28 - 0.9) / 2 + 0.8) / 2, 1e-12);
}

// ref = logp - log 2 on every token: k3 = 0.5 + log 2 - 1 per token.
TEST(LmLossesTest, KlInTheLossAddsBetaTimesEstimate) {
  auto in = ClipCase();
  in.ref_logp = in.logp.detach() - std::log(2.0);
  LmPolicyLossOptions opt;
  opt.clip.clip_high = 0.28;
  opt.clip.dual_clip = 3;
  opt.kl_beta = 0.1;
  auto l = ComputeLmPolicyLoss(in, opt).value();
  double k3 = 0.5 + std::log(2.0) - 1;
  EXPECT_NEAR(l.loss.item<double>(), (-1.28 - 0.9 + 0.8 + 3) / 4 + 0.1 * k3, 1e-12);
  EXPECT_NEAR(l.kl, k3, 1e-12);
  EXPECT_NEAR(l.pg_loss, (-1.28 - 0.9 + 0.8 + 3) / 4, 1e-12);

  in.ref_logp = torch::Tensor();
  EXPECT_FALSE(ComputeLmPolicyLoss(in, opt).ok());
}

TEST(LmLossesTest, PerTokenAdvantagesAreAccepted) {
  auto in = ClipCase();
  in.advantages = D2({1, 1, -1, -1}, 2);
  LmPolicyLossOptions opt;
  opt.clip.clip_high = 0.28;
  EXPECT_NEAR(ComputeLmPolicyLoss(in, opt).value().loss.item<double>(), (-1.28 - 0.9 + 0.8 + 4) / 4,
              1e-12);
  in.advantages = torch::zeros({3});
  auto bad = ComputeLmPolicyLoss(in, opt);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("advantages"), std::string::npos);
}

// The example of docs/lm_losses.md, kept compiling and passing here.
TEST(LmLossesTest, DocExampleGrpoStep) {
  torch::manual_seed(0);
  const int64_t G = 4, B = 8, T = 5, V = 11;
  auto logits = torch::randn({B, T, V}, torch::requires_grad());
  auto tokens = torch::randint(0, V, {B, T}, torch::kLong);
  auto mask = torch::ones({B, T});
  auto rewards = torch::tensor({1.f, 0.f, 0.f, 1.f, 1.f, 1.f, 1.f, 1.f});
  torch::Tensor old_logp, ref_logp;
  {
    torch::NoGradGuard no_grad;
    old_logp = TokenLogprobs(logits, tokens).value();  // from the rollout-time policy
    ref_logp = old_logp - 0.01;                        // from the frozen reference
  }
  // --- example begins
  GroupAdvantageOptions adv_opt;
  adv_opt.group_size = G;
  GroupAdvantages adv = ComputeGroupAdvantages(rewards, adv_opt).value();
  // DAPO dynamic sampling: drop groups whose rewards are all equal.
  auto keep = adv.kept_indices;

  LmPolicyLossOptions opt;
  opt.clip.clip_low = 0.2;
  opt.clip.clip_high = 0.28;  // clip-higher
  opt.kl_beta = 0.04;
  opt.kl_estimator = KlEstimator::kK3;
  opt.aggregation = ParseChoice<LossAggregation>("token-mean").value();
  auto logp = TokenLogprobs(logits, tokens).value();
  LmPolicyLossInput in{logp.index_select(0, keep),           old_logp.index_select(0, keep),
                       adv.advantages.index_select(0, keep), mask.index_select(0, keep),
                       ref_logp.index_select(0, keep),       {}};
  LmPolicyLoss loss = ComputeLmPolicyLoss(in, opt).value();
  loss.loss.backward();
  // --- example ends
  EXPECT_EQ(adv.num_degenerate, 1);
  EXPECT_EQ(keep.size(0), 4);
  EXPECT_NEAR(loss.kl, std::exp(-0.01) - 1 + 0.01, 1e-6);  // k3 at d = -0.01
  EXPECT_EQ(loss.clipfrac_low + loss.clipfrac_high, 0.0);  // ratio 1: nothing clipped
  EXPECT_TRUE(logits.grad().defined());
  EXPECT_EQ(logits.grad()[5].abs().sum().item<float>(), 0.f);  // filtered sample
}

}  // namespace
}  // namespace rlforge
