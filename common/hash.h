// SplitMix64 (Steele, Lea and Flood, 2014; the finaliser of Vigna's splitmix64.c): a fast
// 64-bit mix, the same on every platform, so seeds derived with it reproduce anywhere.
// A bijection: distinct inputs give distinct outputs.
#pragma once

#include <cstdint>

namespace rlforge {

// The increment splitmix64.c adds to its state before each output (2^64 / golden ratio).
inline constexpr uint64_t kSplitMix64Gamma = 0x9E3779B97F4A7C15ull;

// The output of splitmix64.c for state `x`: mixes x + kSplitMix64Gamma. A generator that
// returns SplitMix64(state) and then adds kSplitMix64Gamma to state is splitmix64.c's stream.
constexpr uint64_t SplitMix64(uint64_t x) {
  x += kSplitMix64Gamma;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace rlforge
