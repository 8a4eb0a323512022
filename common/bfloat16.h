// bfloat16 on the host: the top 16 bits of an IEEE float, rounded to nearest even (as torch
// and CUDA's __float2bfloat16_rn round), NaN kept NaN. Pure functions; any thread.
#pragma once

#include <bit>
#include <cstdint>

namespace rlforge {

constexpr uint16_t FloatToBf16Bits(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

constexpr float Bf16BitsToFloat(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

// f rounded to the nearest bfloat16, as a float.
constexpr float RoundToBf16(float f) { return Bf16BitsToFloat(FloatToBf16Bits(f)); }

}  // namespace rlforge
