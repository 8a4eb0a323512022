// Deterministic draws for the generated tasks (arith_task.h, word_problems.h): FNV-1a of a
// text and a splitmix64 stream, the same on every platform, so (seed, split, index) names one
// example everywhere and a problem's split follows from its text alone.
#pragma once

#include <cstdint>
#include <string>

#include "common/hash.h"

namespace rlforge {

// 64-bit FNV-1a of the bytes of `s`.
inline uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// A small deterministic stream: each call mixes the state forward.
class SampleStream {
 public:
  explicit SampleStream(uint64_t seed) : state_(seed) {}
  uint64_t Next() { return state_ = SplitMix64(state_); }
  // Uniform in [lo, hi].
  int64_t Uniform(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(Next() % static_cast<uint64_t>(hi - lo + 1));
  }

 private:
  uint64_t state_;
};

}  // namespace rlforge
