#include "common/hash.h"

#include <gtest/gtest.h>

namespace rlforge {
namespace {

// The first outputs of the reference splitmix64.c seeded with 0.
TEST(SplitMix64Test, MatchesTheReferenceStream) {
  uint64_t state = 0;
  const uint64_t expected[] = {0xE220A8397B1DCDAFull, 0x6E789E6AA1B965F4ull, 0x06C45D188009454Full};
  for (uint64_t want : expected) {
    EXPECT_EQ(SplitMix64(state), want);
    state += kSplitMix64Gamma;
  }
}

TEST(SplitMix64Test, IsAConstantExpression) {
  static_assert(SplitMix64(0) == 0xE220A8397B1DCDAFull);
  EXPECT_NE(SplitMix64(1), SplitMix64(2));
}

}  // namespace
}  // namespace rlforge
