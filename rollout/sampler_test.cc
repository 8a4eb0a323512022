#include "rollout/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

namespace rlforge {
namespace {

std::vector<double> Softmax(const std::vector<float>& l, double t = 1.0) {
  double m = *std::max_element(l.begin(), l.end());
  std::vector<double> p(l.size());
  double s = 0;
  for (size_t i = 0; i < l.size(); ++i) s += p[i] = std::exp((l[i] - m) / t);
  for (double& x : p) x /= s;
  return p;
}

std::vector<int> Histogram(const std::vector<float>& logits, const SamplingParams& params,
                           int draws) {
  std::vector<int> counts(logits.size(), 0);
  auto rng = SampleRng(params.seed, 0);
  std::vector<float> scratch;
  std::vector<int32_t> idx;
  for (int i = 0; i < draws; ++i) {
    auto s = SampleToken(logits.data(), logits.size(), params, rng, scratch, idx);
    ++counts[s.token];
  }
  return counts;
}

const std::vector<float> kLogits = {1.0f, 2.5f, -1.0f, 0.5f, 2.0f, -3.0f};

TEST(Sampler, GreedyTakesArgmaxWithUnmodifiedLogprob) {
  SamplingParams p;
  p.temperature = 0;
  auto rng = SampleRng(1, 0);
  std::vector<float> scratch;
  std::vector<int32_t> idx;
  auto s = SampleToken(kLogits.data(), kLogits.size(), p, rng, scratch, idx);
  EXPECT_EQ(s.token, 1);
  EXPECT_NEAR(s.logprob, std::log(Softmax(kLogits)[1]), 1e-6);
}

TEST(Sampler, LogprobIgnoresTemperatureAndTruncation) {
  SamplingParams p;
  p.temperature = 0.3;
  p.top_k = 2;
  p.top_p = 0.9;
  auto rng = SampleRng(7, 3);
  std::vector<float> scratch;
  std::vector<int32_t> idx;
  auto probs = Softmax(kLogits);
  for (int i = 0; i < 50; ++i) {
    auto s = SampleToken(kLogits.data(), kLogits.size(), p, rng, scratch, idx);
    EXPECT_NEAR(s.logprob, std::log(probs[s.token]), 1e-6);
  }
}

TEST(Sampler, TemperatureOneFollowsSoftmax) {
  SamplingParams p;
  p.seed = 11;
  const int draws = 60000;
  auto counts = Histogram(kLogits, p, draws);
  auto probs = Softmax(kLogits);
  for (size_t i = 0; i < probs.size(); ++i) {
    double sd = std::sqrt(probs[i] * (1 - probs[i]) / draws);
    EXPECT_NEAR(counts[i] / double(draws), probs[i], 5 * sd + 1e-4) << "token " << i;
  }
}

TEST(Sampler, TemperatureSharpens) {
  SamplingParams p;
  p.temperature = 0.5;
  p.seed = 5;
  const int draws = 40000;
  auto counts = Histogram(kLogits, p, draws);
  auto probs = Softmax(kLogits, 0.5);
  for (size_t i = 0; i < probs.size(); ++i) {
    double sd = std::sqrt(probs[i] * (1 - probs[i]) / draws);
    EXPECT_NEAR(counts[i] / double(draws), probs[i], 5 * sd + 1e-4) << "token " << i;
  }
}

TEST(Sampler, TopKDrawsOnlyTheKBest) {
  SamplingParams p;
  p.top_k = 2;
  p.seed = 3;
  auto counts = Histogram(kLogits, p, 20000);
  for (size_t i = 0; i < counts.size(); ++i) {
    if (i != 1 && i != 4) {
      EXPECT_EQ(counts[i], 0) << "token " << i;
    }
  }
  // Renormalised over {1, 4}: p(1) = e^2.5 / (e^2.5 + e^2).
  double p1 = std::exp(2.5) / (std::exp(2.5) + std::exp(2.0));
  EXPECT_NEAR(counts[1] / 20000.0, p1, 0.02);
}

TEST(Sampler, TopPKeepsTheNucleus) {
  auto probs = Softmax(kLogits);  // sorted: 1 (.44), 4 (.27), 0 (.10), 3 (.06) ...
  SamplingParams p;
  p.top_p = probs[1] + probs[4] - 1e-3;  // nucleus {1, 4}
  p.seed = 9;
  auto counts = Histogram(kLogits, p, 20000);
  EXPECT_GT(counts[1], 0);
  EXPECT_GT(counts[4], 0);
  for (int i : {0, 2, 3, 5}) {
    EXPECT_EQ(counts[i], 0) << "token " << i;
  }
  p.top_p = 0.01;  // nothing reaches it alone: the best token stays
  counts = Histogram(kLogits, p, 1000);
  EXPECT_EQ(counts[1], 1000);
}

TEST(Sampler, SameSeedSameDraws) {
  SamplingParams p;
  p.seed = 42;
  std::vector<float> scratch;
  std::vector<int32_t> idx;
  auto a = SampleRng(42, 5), b = SampleRng(42, 5), c = SampleRng(42, 6);
  int differ = 0;
  for (int i = 0; i < 100; ++i) {
    auto x = SampleToken(kLogits.data(), kLogits.size(), p, a, scratch, idx);
    auto y = SampleToken(kLogits.data(), kLogits.size(), p, b, scratch, idx);
    auto z = SampleToken(kLogits.data(), kLogits.size(), p, c, scratch, idx);
    EXPECT_EQ(x.token, y.token);
    differ += x.token != z.token;
  }
  EXPECT_GT(differ, 10);  // another sample index draws another stream
}

}  // namespace
}  // namespace rlforge
