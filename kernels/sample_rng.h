// The sampler's random numbers, one per (seed, step, token id) and the same on the host and
// on the GPU: a counter-based stream (SplitMix64 finalisers), so a draw needs no state and
// depends on nothing but its row's seed and step. Compiled by nvcc (which calls the constexpr
// SplitMix64 from device code under --expt-relaxed-constexpr) and by the host compiler.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/hash.h"

#ifdef __CUDACC__
#define RLFORGE_HOST_DEVICE __host__ __device__
#else
#define RLFORGE_HOST_DEVICE
#endif

namespace rlforge::kernels {

// Uniform in (0, 1), never 0 or 1 (24 random bits, centred in their interval).
RLFORGE_HOST_DEVICE inline double GumbelUniform(uint64_t seed, int64_t step, int32_t token) {
  const uint64_t h = SplitMix64(SplitMix64(seed ^ SplitMix64(static_cast<uint64_t>(step))) ^
                                static_cast<uint64_t>(token));
  return (static_cast<double>(h >> 40) + 0.5) * (1.0 / 16777216.0);
}

// Standard Gumbel noise -log(-log(u)), in double then rounded to float once.
RLFORGE_HOST_DEVICE inline float GumbelNoise(uint64_t seed, int64_t step, int32_t token) {
  return static_cast<float>(-log(-log(GumbelUniform(seed, step, token))));
}

}  // namespace rlforge::kernels
