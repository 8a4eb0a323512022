#include "common/fast_math.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace rlforge {

namespace {

constexpr float kLog2e = 1.44269504f, kLn2Hi = 0.693145751953125f, kLn2Lo = 1.428606765330187e-06f;

// exp(y) for y in [-87, 88]: y = k ln2 + r, |r| <= ln2/2, a degree-7
// polynomial for exp(r), times 2^k built in the exponent bits.
inline float ExpReduced(float y) {
  const float t = y * kLog2e;
  // Round to nearest without a branch (a branch here kept GCC from
  // vectorising the callers' loops: 7.5 ns a tanh instead of 1.1): adding
  // 1.5 * 2^23 leaves no fraction bits.
  const float kf = (t + 12582912.0f) - 12582912.0f;
  const int32_t k = static_cast<int32_t>(kf);
  const float r = (y - kf * kLn2Hi) - kf * kLn2Lo;
  float e = 1.0f / 5040.0f;
  e = e * r + 1.0f / 720.0f;
  e = e * r + 1.0f / 120.0f;
  e = e * r + 1.0f / 24.0f;
  e = e * r + 1.0f / 6.0f;
  e = e * r + 0.5f;
  e = e * r + 1.0f;
  e = e * r + 1.0f;
  const int32_t bits = (k + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return e * scale;
}

}  // namespace

// Each loop is built twice, for x86-64-v3 (AVX2, FMA: 8 floats a step, fused
// multiply-adds) and for the baseline; the loader picks one for the CPU.
#define RLFORGE_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))

RLFORGE_VECTOR_CLONES void ExpInPlace(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = ExpReduced(std::min(std::max(x[i], -87.0f), 88.0f));
}

RLFORGE_VECTOR_CLONES void TanhInPlace(float* x, int64_t n) {
  // |x| < 0.5: the odd Taylor series to x^15 (next term < 5e-9 there).
  // Otherwise tanh|x| = (1 - e) / (1 + e) with e = exp(-2|x|) in (0, 0.37].
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float a = std::fabs(v);
    const float s2 = v * v;
    float poly = 929569.0f / 638512875.0f;
    poly = poly * -s2 + 21844.0f / 6081075.0f;
    poly = poly * s2 - 1382.0f / 155925.0f;
    poly = poly * s2 + 62.0f / 2835.0f;
    poly = poly * s2 - 17.0f / 315.0f;
    poly = poly * s2 + 2.0f / 15.0f;
    poly = poly * s2 - 1.0f / 3.0f;
    const float small = v + v * s2 * poly;
    const float e = ExpReduced(std::max(-2.0f * a, -87.0f));
    const float big = std::copysign((1.0f - e) / (1.0f + e), v);
    x[i] = a < 0.5f ? small : big;
  }
}

}  // namespace rlforge
