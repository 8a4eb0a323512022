// The kernels' CPU references on inputs small enough to work out by hand, and the sampler's
// distribution checked against its exact probabilities. rollout/kernel_reference_test.cc
// checks the references against the engine's CPU code and the model's formulas.
#include "kernels/reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "common/bfloat16.h"
#include "kernels/sample_rng.h"

namespace rlforge::kernels {
namespace {

TEST(Bfloat16Test, RoundsToNearestEvenAndKeepsNan) {
  EXPECT_EQ(FloatToBf16Bits(1.0f), 0x3f80);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1).
  EXPECT_EQ(FloatToBf16Bits(1.0f + 0x1.0p-8f), 0x3f80);
  EXPECT_EQ(FloatToBf16Bits(1.0f + 0x1.8p-8f), 0x3f81);
  EXPECT_TRUE(std::isnan(Bf16BitsToFloat(FloatToBf16Bits(std::nanf("")))));
  EXPECT_EQ(RoundToBf16(-2.5f), -2.5f);
}

// Two positions of one sequence in a pool of two blocks of 2 slots, the sequence's table
// being {1}: slots 2 and 3. Every other slot is NaN, so a read of one would show.
TEST(ReferencePagedAttentionTest, AttendsToTheContextOnlyAndMatchesAHandSoftmax) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> k(4 * 2, nan), v(4 * 2, nan);
  k[4] = 1, k[5] = 0, k[6] = 0, k[7] = 2;  // slot 2: (1, 0); slot 3: (0, 2)
  v[4] = 10, v[5] = 0, v[6] = 0, v[7] = 20;
  std::vector<float> q = {3, 1, 3, 1}, out(4);
  std::vector<int32_t> seq = {0, 0}, context = {1, 2}, tables = {1}, start = {0, 1};
  PagedAttentionArgs a;
  a.q = q.data(), a.k_pool = k.data(), a.v_pool = v.data(), a.out = out.data();
  a.row_seq = seq.data(), a.row_context = context.data(), a.tables = tables.data();
  a.table_start = start.data();
  a.rows = 2, a.num_heads = 1, a.num_kv_heads = 1, a.head_dim = 2, a.block_size = 2;
  a.max_context = 2, a.scale = 0.5f;
  ReferencePagedAttention(a);
  EXPECT_FLOAT_EQ(out[0], 10);  // one position: its value
  EXPECT_FLOAT_EQ(out[1], 0);
  // scores 0.5 * (3, 2) = (1.5, 1): weights e^0.5 / (e^0.5 + 1) and 1 / (e^0.5 + 1).
  const double w = std::exp(0.5) / (std::exp(0.5) + 1);
  EXPECT_NEAR(out[2], 10 * w, 1e-5);
  EXPECT_NEAR(out[3], 20 * (1 - w), 1e-5);
}

// A gap: positions >= skip_from sit skip slots further on.
TEST(ReferencePagedAttentionTest, SkipsTheGapOfASharedPromptsBlock) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> k(8, nan), v(8, nan);  // 8 slots of head_dim 1
  k[0] = 0, v[0] = 1;                       // position 0
  k[3] = 0, v[3] = 3;                       // position 1 lives at slot 1 + 2
  std::vector<float> q = {1}, out(1);
  std::vector<int32_t> seq = {0}, context = {2}, tables = {0, 1}, start = {0, 2};
  std::vector<int64_t> skip_from = {1}, skip = {2};
  PagedAttentionArgs a;
  a.q = q.data(), a.k_pool = k.data(), a.v_pool = v.data(), a.out = out.data();
  a.row_seq = seq.data(), a.row_context = context.data(), a.tables = tables.data();
  a.table_start = start.data(), a.seq_skip_from = skip_from.data(), a.seq_skip = skip.data();
  a.rows = 1, a.num_heads = 1, a.num_kv_heads = 1, a.head_dim = 1, a.block_size = 4;
  a.max_context = 2, a.scale = 1;
  ReferencePagedAttention(a);
  EXPECT_FLOAT_EQ(out[0], 2);  // equal scores: the mean of 1 and 3
}

TEST(ReferenceRmsNormTest, AddsTheResidualThenNormalises) {
  std::vector<float> x = {1, 2}, residual = {2, 2}, weight = {1, 0.5f}, out(2);
  RmsNormArgs a;
  a.x = x.data(), a.residual = residual.data(), a.weight = weight.data(), a.out = out.data();
  a.rows = 1, a.dim = 2, a.eps = 0;
  ReferenceRmsNorm(a);
  EXPECT_EQ(residual, (std::vector<float>{3, 4}));
  const float inv = 1 / std::sqrt(12.5f);  // mean of 9 and 16
  EXPECT_FLOAT_EQ(out[0], 3 * inv);
  EXPECT_FLOAT_EQ(out[1], 0.5f * 4 * inv);
}

TEST(ReferenceRopeTest, RotatesEachPairByPositionTimesFrequency) {
  std::vector<float> q = {1, 0}, k = {0, 2}, inv_freq = {0.5f};
  std::vector<int64_t> positions = {3};
  RopeArgs a;
  a.q = q.data(), a.k = k.data(), a.positions = positions.data(), a.inv_freq = inv_freq.data();
  a.rows = 1, a.num_heads = 1, a.num_kv_heads = 1, a.head_dim = 2, a.rotary_dim = 2;
  ReferenceRope(a);
  const float c = std::cos(1.5f), s = std::sin(1.5f);
  EXPECT_FLOAT_EQ(q[0], c);
  EXPECT_FLOAT_EQ(q[1], s);
  EXPECT_FLOAT_EQ(k[0], -2 * s);
  EXPECT_FLOAT_EQ(k[1], 2 * c);
}

TEST(ReferenceSiluMulTest, GatesTheUpHalf) {
  std::vector<float> x = {0, 2, 5, 3}, out(2);  // gate (0, 2), up (5, 3)
  SiluMulArgs a;
  a.x = x.data(), a.out = out.data(), a.rows = 1, a.inner = 2;
  ReferenceSiluMul(a);
  EXPECT_FLOAT_EQ(out[0], 0);
  EXPECT_FLOAT_EQ(out[1], 3 * 2 / (1 + std::exp(-2.0f)));
}

TEST(ReferenceLogprobTest, IsTheLogSoftmaxOfTheTarget) {
  std::vector<float> logits = {0, std::log(3.0f)}, out(1);
  std::vector<int32_t> target = {1};
  LogprobArgs a;
  a.logits = logits.data(), a.targets = target.data(), a.logprobs = out.data();
  a.rows = 1, a.vocab = 2;
  ReferenceLogprob(a);
  EXPECT_NEAR(out[0], std::log(0.75), 1e-6);
}

TEST(SampleCandidatesTest, TopKThenTheSmallestPrefixReachingTopP) {
  // Probabilities at T = 1 proportional to 8, 4, 2, 1, 1 (ids 3, 0, 4, 1, 2).
  std::vector<float> l = {std::log(4.0f), 0, 0, std::log(8.0f), std::log(2.0f)};
  Candidates all = SampleCandidates(l.data(), 5, 1, 0, 1);
  EXPECT_EQ(all.tokens, (std::vector<int32_t>{3, 0, 4, 1, 2}));
  EXPECT_NEAR(all.probs[0], 0.5, 1e-9);
  Candidates k3 = SampleCandidates(l.data(), 5, 1, 3, 1);
  EXPECT_EQ(k3.tokens, (std::vector<int32_t>{3, 0, 4}));
  EXPECT_NEAR(k3.probs[2], 2.0 / 14, 1e-9);
  // Within the top 3 (mass 14): 8 < 0.8 * 14 = 11.2 <= 12, so two tokens.
  Candidates p = SampleCandidates(l.data(), 5, 1, 3, 0.8f);
  EXPECT_EQ(p.tokens, (std::vector<int32_t>{3, 0}));
  EXPECT_NEAR(p.probs[1], 4.0 / 12, 1e-9);
}

TEST(ReferenceSampleTest, DrawsTheCandidatesDistributionAndOnlyIt) {
  const int32_t vocab = 12, draws = 20000;
  std::vector<float> row = {0.3f, -1, 2, 0.9f, 1.4f, -0.2f, 0.1f, 1.1f, -2, 0.6f, 1.7f, 0};
  std::vector<float> logits, temperature(draws, 0.8f), top_p(draws, 0.9f), logprobs(draws);
  for (int i = 0; i < draws; ++i) logits.insert(logits.end(), row.begin(), row.end());
  std::vector<int32_t> top_k(draws, 8), tokens(draws);
  std::vector<uint64_t> seeds(draws, 7);
  std::vector<int64_t> steps(draws);
  for (int i = 0; i < draws; ++i) steps[i] = i;
  SampleArgs a;
  a.logits = logits.data(), a.temperature = temperature.data(), a.top_k = top_k.data();
  a.top_p = top_p.data(), a.seeds = seeds.data(), a.steps = steps.data();
  a.tokens = tokens.data(), a.logprobs = logprobs.data(), a.rows = draws, a.vocab = vocab;
  ReferenceSample(a);
  const Candidates c = SampleCandidates(row.data(), vocab, 0.8f, 8, 0.9f);
  // Critical value of chi-square at p = 0.001 for up to 11 degrees of freedom.
  EXPECT_LT(CandidatesChiSquare(tokens, c), 31.3) << c.tokens.size() << " candidates";
  EXPECT_NEAR(logprobs[0], row[tokens[0]] - std::log([&] {
                             double s = 0;
                             for (float v : row) s += std::exp(v);
                             return s;
                           }()),
              1e-5);
}

TEST(ReferenceSampleTest, TemperatureZeroTakesTheFirstLargest) {
  std::vector<float> logits = {1, 3, 3, 2};
  float t = 0, p = 1, lp = 0;
  int32_t k = 0, token = -1;
  uint64_t seed = 1;
  int64_t step = 0;
  SampleArgs a;
  a.logits = logits.data(), a.temperature = &t, a.top_k = &k, a.top_p = &p, a.seeds = &seed;
  a.steps = &step, a.tokens = &token, a.logprobs = &lp, a.rows = 1, a.vocab = 4;
  ReferenceSample(a);
  EXPECT_EQ(token, 1);
}

TEST(CandidatesChiSquareTest, IsZeroForExactCountsAndInfiniteOutsideTheCandidates) {
  Candidates c{{2, 0}, {0.75, 0.25}};
  EXPECT_EQ(CandidatesChiSquare({2, 2, 0, 2}, c), 0);
  EXPECT_NEAR(CandidatesChiSquare({2, 2, 2, 2}, c), 1.0 / 3 + 1, 1e-12);
  EXPECT_TRUE(std::isinf(CandidatesChiSquare({2, 1}, c)));
}

TEST(GumbelUniformTest, StaysInsideTheOpenIntervalAndDependsOnEveryInput) {
  EXPECT_GT(GumbelUniform(0, 0, 0), 0);
  EXPECT_LT(GumbelUniform(~0ull, -1, -1), 1);
  EXPECT_NE(GumbelUniform(1, 2, 3), GumbelUniform(2, 2, 3));
  EXPECT_NE(GumbelUniform(1, 2, 3), GumbelUniform(1, 3, 3));
  EXPECT_NE(GumbelUniform(1, 2, 3), GumbelUniform(1, 2, 4));
}

}  // namespace
}  // namespace rlforge::kernels
