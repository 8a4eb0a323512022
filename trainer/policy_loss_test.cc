#include "trainer/policy_loss.h"

#include <gtest/gtest.h>

#include <cmath>

#include "config/job_config.h"
#include "config/policy_loss_registry.h"

namespace rlforge {
namespace {

torch::Tensor D(std::initializer_list<double> v) {
  return torch::tensor(std::vector<double>(v), torch::kFloat64);
}
torch::Tensor D2(std::initializer_list<double> v, int64_t rows) { return D(v).reshape({rows, -1}); }

// float64 throughout: the sums below have at most 6 terms, so the results agree with the
// hand-computed values to a few ulps of 1; 1e-12 leaves three orders of magnitude.
constexpr double kTol = 1e-12;

// Two sequences of up to 3 tokens, old_logp 0, so log r = logp:
//   sequence 0: A = +1, log r = [0.1, 0.3], then padding whose logprob is -inf;
//   sequence 1: A = -1, log r = [-0.2, 0, -0.4].
// GSPO: log s_0 = 0.2, s_0 = e^0.2 = 1.2214; log s_1 = -0.2, s_1 = e^-0.2 = 0.8187.
LmPolicyLossInput SequenceCase() {
  LmPolicyLossInput in;
  in.logp = D2({0.1, 0.3, -INFINITY, -0.2, 0.0, -0.4}, 2);
  in.logp.requires_grad_(true);
  in.old_logp = torch::zeros({2, 3}, torch::kFloat64);
  in.advantages = D({1, -1});
  in.mask = D2({1, 1, 0, 1, 1, 1}, 2);
  return in;
}

LmPolicyLossOptions Options(double clip_low, double clip_high, LossAggregation agg) {
  LmPolicyLossOptions o;
  o.clip.clip_low = clip_low;
  o.clip.clip_high = clip_high;
  o.aggregation = agg;
  return o;
}

void ExpectGrad(const torch::Tensor& got, const torch::Tensor& want) {
  EXPECT_TRUE(torch::allclose(got, want, kTol, kTol)) << got << "\nwanted\n" << want;
}

// Clip 0.2 / 0.2, seq-mean-token-mean. s_0 = 1.2214 > 1.2 with A > 0: clipped, both tokens
// -1.2 and no gradient. s_1 = 0.8187 is inside [0.8, 1.2]: each token 0.8187, and
// d/dlogp_1,t = (1/2 sequences) (1/3 tokens) (-A s_1) = s_1 / 6 on each of its tokens.
// Loss: ((-1.2 - 1.2) / 2 + 3 s_1 / 3) / 2 = (s_1 - 1.2) / 2.
TEST(PolicyLossTest, GspoClipsWholeSequencesByTheirMeanLogRatio) {
  auto in = SequenceCase();
  const double s0 = std::exp(0.2), s1 = std::exp(-0.2);
  auto l = ComputeGspoLoss(in, Options(0.2, 0.2, LossAggregation::kSeqMeanTokenMean));
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_NEAR(l->loss.item<double>(), (s1 - 1.2) / 2, kTol);
  EXPECT_NEAR(l->pg_loss, (s1 - 1.2) / 2, kTol);
  EXPECT_NEAR(l->clipfrac_high, 2.0 / 5, kTol);  // sequence 0's two tokens of five
  EXPECT_EQ(l->clipfrac_low, 0.0);
  EXPECT_NEAR(l->ratio_mean, (2 * s0 + 3 * s1) / 5, kTol);
  double approx_kl = 0;
  for (double lr : {0.1, 0.3, -0.2, 0.0, -0.4}) approx_kl += (std::exp(lr) - 1 - lr) / 5;
  EXPECT_NEAR(l->approx_kl, approx_kl, kTol);
  l->loss.backward();
  ExpectGrad(in.logp.grad(), D2({0, 0, 0, s1 / 6, s1 / 6, s1 / 6}, 2));
}

// Clip 0.2 / 0.28: no sequence clipped. Every token of sequence i carries the same gradient,
// (1/2) (1/|y_i|) (-A_i s_i): -s_0 / 4 and s_1 / 6. The token-level loss (ppo_clip) gives each
// token its own ratio instead: -e^0.1 / 4 on sequence 0's first token, and 0 on its second,
// whose ratio e^0.3 = 1.35 is above 1.28 though its sequence's s_0 = 1.22 is not.
TEST(PolicyLossTest, GspoGivesEveryTokenItsSequencesRatio) {
  auto in = SequenceCase();
  const double s0 = std::exp(0.2), s1 = std::exp(-0.2);
  auto l = ComputeGspoLoss(in, Options(0.2, 0.28, LossAggregation::kSeqMeanTokenMean));
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_NEAR(l->loss.item<double>(), (-s0 + s1) / 2, kTol);
  EXPECT_EQ(l->clipfrac_high, 0.0);
  l->loss.backward();
  ExpectGrad(in.logp.grad(), D2({-s0 / 4, -s0 / 4, 0, s1 / 6, s1 / 6, s1 / 6}, 2));

  auto tok = SequenceCase();
  tok.logp = D2({0.1, 0.3, 0.0, -0.2, 0.0, -0.4}, 2).requires_grad_(true);  // finite padding
  auto ppo = ComputeLmPolicyLoss(tok, Options(0.2, 0.28, LossAggregation::kSeqMeanTokenMean));
  ASSERT_TRUE(ppo.ok()) << ppo.status();
  ppo->loss.backward();
  EXPECT_NEAR(tok.logp.grad()[0][0].item<double>(), -std::exp(0.1) / 4, kTol);
  EXPECT_EQ(tok.logp.grad()[0][1].item<double>(), 0.0);
}

// GSPO's paper states the objective per sequence, mean_i min(s_i A_i, clip(s_i) A_i) with
// the gradient flowing through s_i; the token form (what we compute) must give the same loss
// and gradient when each sequence has one advantage, seq-mean-token-mean. Random inputs,
// some sequences clipped, float64.
TEST(PolicyLossTest, GspoTokenFormEqualsTheSequenceObjective) {
  torch::manual_seed(7);
  const int64_t B = 6, T = 5;
  auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  const torch::Tensor logp0 = torch::randn({B, T}, opts) * 0.05 - 1;
  const torch::Tensor old = logp0 + torch::randn({B, T}, opts) * 0.05;
  const torch::Tensor adv = torch::randn({B}, opts);
  torch::Tensor mask = torch::ones({B, T}, opts);
  mask[1][4] = 0;
  mask[2][3] = 0;
  mask[2][4] = 0;
  const LmPolicyLossOptions o = Options(0.02, 0.03, LossAggregation::kSeqMeanTokenMean);

  LmPolicyLossInput in;
  in.logp = logp0.clone().requires_grad_(true);
  in.old_logp = old;
  in.advantages = adv;
  in.mask = mask;
  auto l = ComputeGspoLoss(in, o);
  ASSERT_TRUE(l.ok()) << l.status();
  l->loss.backward();

  const torch::Tensor logp = logp0.clone().requires_grad_(true);
  const torch::Tensor s = (((logp - old) * mask).sum(1) / mask.sum(1)).exp();
  const torch::Tensor seq =
      -torch::min(s * adv, s.clamp(1 - o.clip.clip_low, 1 + o.clip.clip_high) * adv);
  const torch::Tensor want = seq.mean();
  want.backward();
  EXPECT_GT(l->clipfrac_low + l->clipfrac_high, 0.0) << "some sequence should be clipped";
  EXPECT_NEAR(l->loss.item<double>(), want.item<double>(), kTol);
  ExpectGrad(in.logp.grad(), logp.grad());
}

// CISPO, no lower bound (clip_low 1), clip_high 0.2, token-mean over 5 tokens; w = sg(clip(r)).
//   sequence 0 (A = +1): r = e^0.1 = 1.1052 (kept), e^0.3 = 1.3499 -> 1.2;
//   sequence 1 (A = -1): r = e^-0.2, 1, e^-0.4 (all kept: no lower bound).
// Per token -w A logp: -0.1 e^0.1, -1.2 * 0.3, -0.2 e^-0.2, 0, -0.4 e^-0.4; loss = sum / 5.
// Gradient -w A / 5: the clipped token keeps a gradient (1.2 / 5), unlike ppo_clip's 0.
TEST(PolicyLossTest, CispoWeighsReinforceByTheClippedStopGradientRatio) {
  auto in = SequenceCase();
  const double a = std::exp(0.1), b = std::exp(-0.2), c = std::exp(-0.4);
  auto l = ComputeCispoLoss(in, Options(1.0, 0.2, LossAggregation::kTokenMean));
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_NEAR(l->loss.item<double>(), (-0.1 * a - 1.2 * 0.3 - 0.2 * b - 0.4 * c) / 5, kTol);
  EXPECT_NEAR(l->clipfrac_high, 1.0 / 5, kTol);
  EXPECT_EQ(l->clipfrac_low, 0.0);
  EXPECT_NEAR(l->ratio_mean, (a + std::exp(0.3) + b + 1 + c) / 5, kTol);
  l->loss.backward();
  ExpectGrad(in.logp.grad(), D2({-a / 5, -1.2 / 5, 0, b / 5, 1.0 / 5, c / 5}, 2));

  // clip_low 0.2: e^-0.4 = 0.6703 < 0.8 is raised to 0.8 (gradient 0.8 / 5).
  auto low = SequenceCase();
  auto l2 = ComputeCispoLoss(low, Options(0.2, 0.2, LossAggregation::kTokenMean));
  ASSERT_TRUE(l2.ok()) << l2.status();
  EXPECT_NEAR(l2->loss.item<double>(), (-0.1 * a - 1.2 * 0.3 - 0.2 * b - 0.4 * 0.8) / 5, kTol);
  EXPECT_NEAR(l2->clipfrac_low, 1.0 / 5, kTol);
  l2->loss.backward();
  ExpectGrad(low.logp.grad(), D2({-a / 5, -1.2 / 5, 0, b / 5, 1.0 / 5, 0.8 / 5}, 2));
}

// The paper's configuration through the config loader: no lower bound (clip_low 1, accepted for
// cispo alone), token-mean; and the options only ppo_clip has are errors naming the loss.
TEST(PolicyLossTest, CispoConfigTakesClipLowOneAndRefusesPpoClipsOptions) {
  LoadedJob j =
      LoadJobText("job: {algorithm: grpo}\ngrpo: {policy_loss: cispo, clip_low: 1}\n", "t.yaml");
  ASSERT_TRUE(j.ok()) << config::FormatErrors(j.errors);
  EXPECT_EQ(j.config.grpo.loss_aggregation, LossAggregation::kTokenMean);
  LoadedJob tis = LoadJobText(
      "job: {algorithm: grpo}\ngrpo: {policy_loss: cispo, off_policy: tis}\n", "t.yaml");
  ASSERT_EQ(tis.errors.size(), 1u) << config::FormatErrors(tis.errors);
  EXPECT_NE(tis.errors[0].message.find("policy_loss cispo has no off-policy correction"),
            std::string::npos);
  auto in = SequenceCase();
  LmPolicyLossOptions dual = Options(1.0, 0.2, LossAggregation::kTokenMean);
  dual.clip.dual_clip = 3;
  EXPECT_EQ(ComputeCispoLoss(in, dual).status().message(),
            "dual_clip: cispo has no dual clip (ppo_clip's), got 3");
}

// The KL term is added per token and aggregated with the policy term, as in ppo_clip:
// ref_logp = logp - 0.1 on every token, so k3 = e^-0.1 + 0.1 - 1 everywhere.
TEST(PolicyLossTest, KlTermIsAddedPerTokenForEveryLoss) {
  const double k3 = std::exp(-0.1) + 0.1 - 1;
  for (const PolicyLossSpec& spec : PolicyLosses()) {
    SCOPED_TRACE(spec.name);
    auto in = SequenceCase();
    in.logp = D2({0.1, 0.3, 0.0, -0.2, 0.0, -0.4}, 2).requires_grad_(true);
    in.ref_logp = in.logp.detach() - 0.1;
    LmPolicyLossOptions o = Options(0.2, 0.2, LossAggregation::kTokenMean);
    o.kl_beta = 0.5;
    auto l = CreatePolicyLoss(spec.kind, o)->Compute(in);
    ASSERT_TRUE(l.ok()) << l.status();
    EXPECT_NEAR(l->kl, k3, kTol);
    EXPECT_NEAR(l->loss.item<double>(), l->pg_loss + 0.5 * k3, kTol);
    o.kl_beta = 0.5;
    in.ref_logp = torch::Tensor();
    EXPECT_NE(CreatePolicyLoss(spec.kind, o)->Compute(in).status().message().find("ref_logp"),
              std::string::npos);
  }
}

// The trainer leaves zero-advantage groups out of its forward (grpo.skip_zero_advantage)
// because every loss's policy term is A times a factor: exactly 0, with gradient exactly 0.
TEST(PolicyLossTest, ZeroAdvantageGivesZeroLossAndGradient) {
  for (const PolicyLossSpec& spec : PolicyLosses()) {
    for (LossAggregation agg :
         {LossAggregation::kTokenMean, LossAggregation::kSeqMeanTokenMean,
          LossAggregation::kSeqMeanTokenSum, LossAggregation::kSeqMeanTokenSumNorm}) {
      SCOPED_TRACE(spec.name + " " + std::string(ChoiceName(agg)));
      auto in = SequenceCase();
      in.logp = D2({0.1, 0.3, 0.0, -0.2, 0.0, -0.4}, 2).requires_grad_(true);
      in.advantages = torch::zeros({2}, torch::kFloat64);
      auto l = CreatePolicyLoss(spec.kind, Options(0.2, 0.28, agg))->Compute(in);
      ASSERT_TRUE(l.ok()) << l.status();
      EXPECT_EQ(l->loss.item<double>(), 0.0);
      l->loss.backward();
      EXPECT_EQ(in.logp.grad().abs().max().item<double>(), 0.0);
    }
  }
}

// The table's clip_low_one_unbounded, which the config loader reads, says what the loss accepts.
TEST(PolicyLossTest, ClipLowOneIsAcceptedExactlyWhereTheTableSaysSo) {
  for (const PolicyLossSpec& spec : PolicyLosses()) {
    auto in = SequenceCase();
    in.logp = D2({0.1, 0.3, 0.0, -0.2, 0.0, -0.4}, 2);
    auto l =
        CreatePolicyLoss(spec.kind, Options(1.0, 0.2, LossAggregation::kTokenMean))->Compute(in);
    EXPECT_EQ(l.ok(), spec.clip_low_one_unbounded) << spec.name << ": " << l.status();
  }
}

TEST(PolicyLossTest, OptionsOnlyPpoClipHasAreErrorsNamingThem) {
  auto in = SequenceCase();
  LmPolicyLossOptions dual = Options(0.2, 0.2, LossAggregation::kTokenMean);
  dual.clip.dual_clip = 3;
  EXPECT_EQ(ComputeGspoLoss(in, dual).status().message(),
            "dual_clip: gspo has no dual clip (ppo_clip's), got 3");
  LmPolicyLossOptions tis = Options(0.2, 0.2, LossAggregation::kTokenMean);
  tis.correction = OffPolicyCorrection::kTruncatedIs;
  EXPECT_EQ(ComputeGspoLoss(in, tis).status().message(),
            "correction: gspo has no off-policy correction (ppo_clip's)");
  EXPECT_EQ(ComputeGspoLoss(in, Options(1.0, 0.2, LossAggregation::kTokenMean)).status().message(),
            "clip: gspo expects 0 <= clip_low < 1 and clip_high >= 0, got clip_low 1, clip_high "
            "0.2");
  in.advantages = D({1, 2, 3});
  EXPECT_NE(ComputeGspoLoss(in, Options(0.2, 0.2, LossAggregation::kTokenMean))
                .status()
                .message()
                .find("advantages: expected [2] or [2, 3]"),
            std::string::npos);
}

// CreatePolicyLoss(config) reads grpo.policy_loss (auto: the algorithm's default) and the
// grpo section's clip bounds and aggregation.
TEST(PolicyLossTest, JobConfigChoosesTheLoss) {
  for (const PolicyLossSpec& spec : PolicyLosses()) {
    SCOPED_TRACE(spec.name);
    LoadedJob j = LoadJobText(
        "job: {algorithm: grpo}\ngrpo: {policy_loss: " + spec.name + ", clip_high: 0.2}\n",
        "t.yaml");
    ASSERT_TRUE(j.ok()) << config::FormatErrors(j.errors);
    auto loss = CreatePolicyLoss(j.config, /*kl_in_loss=*/true);
    ASSERT_TRUE(loss.ok()) << loss.status();
    EXPECT_EQ((*loss)->options().clip.clip_high, 0.2);
    EXPECT_EQ((*loss)->options().aggregation,
              spec.default_loss_aggregation.value_or(LossAggregation::kTokenMean));
    auto in = SequenceCase();
    in.logp = D2({0.1, 0.3, 0.0, -0.2, 0.0, -0.4}, 2);
    auto got = (*loss)->Compute(in);
    ASSERT_TRUE(got.ok()) << got.status();
    const LmPolicyLossOptions& o = (*loss)->options();
    auto want = spec.kind == PolicyLossKind::kGspo    ? ComputeGspoLoss(in, o)
                : spec.kind == PolicyLossKind::kCispo ? ComputeCispoLoss(in, o)
                                                      : ComputeLmPolicyLoss(in, o);
    EXPECT_EQ(got->loss.item<double>(), want->loss.item<double>());
  }
  // GSPO averages each sequence's token terms, then the sequences.
  EXPECT_EQ(FindPolicyLoss("gspo")->default_loss_aggregation, LossAggregation::kSeqMeanTokenMean);
  JobConfig c;
  c.job.algorithm = FindAlgorithm("grpo");
  c.grpo.loss_aggregation = LossAggregation::kTokenMean;
  auto ppo = CreatePolicyLoss(c, true);  // policy_loss unset: grpo's default, ppo_clip
  ASSERT_TRUE(ppo.ok()) << ppo.status();
  auto in = SequenceCase();
  in.logp = D2({0.1, 0.3, 0.0, -0.2, 0.0, -0.4}, 2);
  EXPECT_EQ((*ppo)->Compute(in)->loss.item<double>(),
            ComputeLmPolicyLoss(in, (*ppo)->options())->loss.item<double>());
}

}  // namespace
}  // namespace rlforge
