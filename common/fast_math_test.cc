#include "common/fast_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace rlforge {
namespace {

TEST(FastMathTest, TanhMatchesStdTanh) {
  std::vector<float> x;
  for (float v = -100.0f; v <= 100.0f; v += 0.0137f) x.push_back(v);
  for (float v : {0.0f, -0.0f, 0.4999999f, 0.5f, 1e-30f, -1e-8f, 87.0f, -1e30f, 1e30f}) {
    x.push_back(v);
  }
  std::vector<float> y = x;
  TanhInPlace(y.data(), static_cast<int64_t>(y.size()));
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    double want = std::tanh(static_cast<double>(x[i]));
    worst = std::max(worst, std::abs(y[i] - want));
    ASSERT_LE(std::abs(y[i]), 1.0f) << x[i];
  }
  EXPECT_LT(worst, 2.5e-7);
  EXPECT_EQ(y[x.size() - 9], 0.0f);
}

TEST(FastMathTest, ExpMatchesStdExpToAFewUlp) {
  std::vector<float> x;
  for (float v = -87.0f; v <= 88.0f; v += 0.00731f) x.push_back(v);
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-7f, 0.34657359f, -0.34657359f}) x.push_back(v);
  std::vector<float> y = x;
  ExpInPlace(y.data(), static_cast<int64_t>(y.size()));
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    double want = std::exp(static_cast<double>(x[i]));
    worst = std::max(worst, std::abs(y[i] - want) / want);
  }
  EXPECT_LT(worst, 3e-7);  // 2.5 ulp of float
  float big[2] = {-1000.0f, 1000.0f};
  ExpInPlace(big, 2);
  EXPECT_GE(big[0], 0.0f);
  EXPECT_LT(big[0], 1e-37f);
  EXPECT_TRUE(std::isfinite(big[1]));
}

}  // namespace
}  // namespace rlforge
