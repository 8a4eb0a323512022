#include "common/timing_keys.h"

#include <gtest/gtest.h>

#include <unordered_map>

namespace rlforge {
namespace {

TEST(TimingKeysTest, SecondsAndRatesAreTimings) {
  EXPECT_TRUE(IsTimingKey("train_s"));
  EXPECT_TRUE(IsTimingKey("generate_tokens_per_s"));
  EXPECT_FALSE(IsTimingKey("loss"));
  EXPECT_FALSE(IsTimingKey("reward/mean"));
  EXPECT_FALSE(IsTimingKey("steps"));  // ends in "s", not "_s"
  EXPECT_FALSE(IsTimingKey("_"));
  EXPECT_FALSE(IsTimingKey(""));
}

TEST(TimingKeysTest, SplitsAReportAndOverwrites) {
  std::unordered_map<std::string, double> reported = {
      {"loss", 0.25}, {"train_s", 1.5}, {"tokens_per_s", 900.0}, {"kl", 0.01}};
  std::map<std::string, double> timings = {{"train_s", 9.0}, {"eval_s", 2.0}};
  std::map<std::string, double> metrics = {{"loss", 7.0}, {"step", 3.0}};
  SplitTimingsFromMetrics(reported, timings, metrics);
  EXPECT_EQ(timings, (std::map<std::string, double>{
                         {"eval_s", 2.0}, {"tokens_per_s", 900.0}, {"train_s", 1.5}}));
  EXPECT_EQ(metrics, (std::map<std::string, double>{{"kl", 0.01}, {"loss", 0.25}, {"step", 3.0}}));
}

}  // namespace
}  // namespace rlforge
