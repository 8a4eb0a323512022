#include "rollout/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/fast_math.h"
#include "common/hash.h"

namespace rlforge {

namespace {

// Uniform in [0, 1) with 53 random bits.
double Uniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

}  // namespace

uint64_t SampleSeed(uint64_t seed, int64_t index) {
  return SplitMix64(SplitMix64(seed) ^ static_cast<uint64_t>(index));
}

std::mt19937_64 SampleRng(uint64_t seed, int64_t index) {
  return std::mt19937_64(SampleSeed(seed, index));
}

SampledToken SampleToken(const float* logits, int64_t vocab, const SamplingParams& params,
                         std::mt19937_64& rng, std::vector<float>& scratch,
                         std::vector<int32_t>& index_scratch) {
  float max_logit = -std::numeric_limits<float>::infinity();
  int32_t argmax = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    if (logits[i] > max_logit) {
      max_logit = logits[i];
      argmax = static_cast<int32_t>(i);
    }
  }
  // exp(logit - max) for the normaliser: vectorised float exp (2 ulp), summed
  // in double; libm's scalar double exp here cost ~8% of generation.
  scratch.resize(vocab);
  for (int64_t i = 0; i < vocab; ++i) scratch[i] = logits[i] - max_logit;
  ExpInPlace(scratch.data(), vocab);
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += scratch[i];
  const double log_z = static_cast<double>(max_logit) + std::log(sum);
  auto logprob_of = [&](int32_t t) { return static_cast<float>(logits[t] - log_z); };

  if (params.temperature <= 0) return {argmax, logprob_of(argmax)};

  // Tempered weights, relative to the max so nothing overflows (at temperature
  // 1 they are the normaliser's terms already).
  const double inv_t = 1.0 / params.temperature;
  const bool truncate = (params.top_k > 0 && params.top_k < vocab) || params.top_p < 1.0;
  if (!truncate) {
    if (inv_t != 1.0) {
      for (int64_t i = 0; i < vocab; ++i) {
        scratch[i] = static_cast<float>((logits[i] - max_logit) * inv_t);
      }
      ExpInPlace(scratch.data(), vocab);
    }
    double total = 0;
    for (int64_t i = 0; i < vocab; ++i) total += scratch[i];
    double u = Uniform(rng) * total;
    double acc = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      acc += scratch[i];
      if (u < acc) return {static_cast<int32_t>(i), logprob_of(static_cast<int32_t>(i))};
    }
    return {argmax, logprob_of(argmax)};  // u landed on the rounding edge
  }

  // Candidates sorted by logit, descending (ties by token id for determinism).
  index_scratch.resize(vocab);
  for (int64_t i = 0; i < vocab; ++i) index_scratch[i] = static_cast<int32_t>(i);
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  int64_t keep = vocab;
  if (params.top_k > 0 && params.top_k < vocab) {
    keep = params.top_k;
    std::partial_sort(index_scratch.begin(), index_scratch.begin() + keep, index_scratch.end(),
                      by_logit);
  } else {
    std::sort(index_scratch.begin(), index_scratch.end(), by_logit);
  }
  double total = 0;
  for (int64_t j = 0; j < keep; ++j) {
    scratch[j] = static_cast<float>(std::exp((logits[index_scratch[j]] - max_logit) * inv_t));
    total += scratch[j];
  }
  if (params.top_p < 1.0) {
    // Smallest prefix whose tempered mass reaches top_p (at least one token).
    double acc = 0;
    int64_t cut = keep;
    for (int64_t j = 0; j < keep; ++j) {
      acc += scratch[j];
      if (acc >= params.top_p * total) {
        cut = j + 1;
        break;
      }
    }
    keep = cut;
    total = acc;
  }
  double u = Uniform(rng) * total;
  double acc = 0;
  for (int64_t j = 0; j < keep; ++j) {
    acc += scratch[j];
    if (u < acc) return {index_scratch[j], logprob_of(index_scratch[j])};
  }
  return {index_scratch[keep - 1], logprob_of(index_scratch[keep - 1])};
}

}  // namespace rlforge
