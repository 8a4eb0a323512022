// Sampler: one next token per sequence from a row of logits.
//
// logits row -> log-softmax (the policy's own distribution) -> temperature,
// top-k, top-p -> draw with the sequence's RNG -> token + its logprob
//
// The logprob returned is always under the unmodified distribution
// (temperature 1, no truncation): that is what the trainer's importance
// ratio compares against. Each sequence carries its own RNG seeded from the
// request's seed and the sample's index, so what a sequence draws does not
// depend on which other sequences share its batch. Thread-safe for distinct
// rows.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace rlforge {

struct SamplingParams {
  double temperature = 1.0;  // 0: greedy
  int64_t top_k = 0;         // 0: off
  double top_p = 1.0;        // 1: off
  int64_t max_tokens = 256;
  std::vector<int32_t> stop_token_ids;
  std::vector<std::string> stop_strings;
  uint64_t seed = 0;
};

// The seed of sample `index` of a request seeded with `seed`: it seeds the sample's RNG below
// (the CPU engine's own path) and is the seed of its draws through the sampler kernel
// (kernels/sample_rng.h, the kernel path), so a sample's draws never depend on its batch.
uint64_t SampleSeed(uint64_t seed, int64_t index);

// The RNG of sample `index` of a request seeded with `seed`.
std::mt19937_64 SampleRng(uint64_t seed, int64_t index);

struct SampledToken {
  int32_t token = 0;
  float logprob = 0;
};

// Draws from `logits[0..vocab)`. `scratch` is reused between calls.
SampledToken SampleToken(const float* logits, int64_t vocab, const SamplingParams& params,
                         std::mt19937_64& rng, std::vector<float>& scratch,
                         std::vector<int32_t>& index_scratch);

}  // namespace rlforge
