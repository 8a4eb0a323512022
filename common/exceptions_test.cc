#include "common/exceptions.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "absl/status/statusor.h"

namespace rlforge {
namespace {

TEST(CallCatchingTest, PassesResultsThrough) {
  EXPECT_TRUE(CallCatching([] { return absl::OkStatus(); }).ok());
  absl::Status s = CallCatching([] { return absl::NotFoundError("no model"); });
  EXPECT_EQ(s, absl::NotFoundError("no model"));
  absl::StatusOr<int> v = CallCatching([]() -> absl::StatusOr<int> { return 7; });
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 7);
}

TEST(CallCatchingTest, TurnsAnExceptionIntoInternalErrorNamingLibtorch) {
  absl::StatusOr<int> v = CallCatching(
      []() -> absl::StatusOr<int> { throw std::runtime_error("shape mismatch [2, 3] vs [3, 2]"); });
  EXPECT_EQ(v.status(), absl::InternalError("libtorch: shape mismatch [2, 3] vs [3, 2]"));
}

TEST(CallCatchingTest, TakesAnotherPrefix) {
  absl::Status s = CallCatching([]() -> absl::Status { throw std::out_of_range("index 9"); },
                                "engine: forward failed: ");
  EXPECT_EQ(s, absl::InternalError("engine: forward failed: index 9"));
}

TEST(CallCatchingTest, RunsTheCallableOnce) {
  int calls = 0;
  EXPECT_TRUE(CallCatching([&] {
                ++calls;
                return absl::OkStatus();
              }).ok());
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace rlforge
