#include "common/strings.h"

#include <gtest/gtest.h>

namespace rlforge {
namespace {

TEST(EditDistanceTest, HandComputed) {
  EXPECT_EQ(EditDistance("", ""), 0);
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3);
  EXPECT_EQ(EditDistance("rollout", "rolout"), 1);
  EXPECT_EQ(EditDistance("abc", ""), 3);
}

TEST(NearestWordTest, SuggestsOnlyPlausibleTypos) {
  std::vector<std::string> keys = {"workers", "heartbeat_interval_ms", "seed"};
  EXPECT_EQ(NearestWord("wrokers", keys), "workers");
  EXPECT_EQ(NearestWord("heartbeat_interval", keys), "heartbeat_interval_ms");
  EXPECT_EQ(NearestWord("zzzzzzzzzzzz", keys), "");
}

TEST(JoinOrTest, Formats) {
  EXPECT_EQ(JoinOr({"a"}), "a");
  EXPECT_EQ(JoinOr({"a", "b"}), "a or b");
  EXPECT_EQ(JoinOr({"a", "b", "c"}), "a, b or c");
}

TEST(HumanBytesTest, Formats) {
  EXPECT_EQ(HumanBytes(64), "64 B");
  EXPECT_EQ(HumanBytes(64.0 * 1024 * 1024), "64.0 MiB");
}

}  // namespace
}  // namespace rlforge
