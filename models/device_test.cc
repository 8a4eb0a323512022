#include "models/device.h"

#include <gtest/gtest.h>

#include "config/device.h"

namespace rlforge::models {
namespace {

TEST(TorchDeviceTest, CpuIsTheCpuForEveryRank) {
  for (int rank : {0, 3}) {
    absl::StatusOr<torch::Device> d = TorchDevice("trainer.device", "cpu", rank);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_TRUE(d->is_cpu());
  }
}

TEST(TorchDeviceTest, ABadValueNamesTheKey) {
  absl::StatusOr<torch::Device> d = TorchDevice("engine.device", "gpu0", 0);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("engine.device: 'gpu0' is not a device"), std::string::npos)
      << d.status();
}

// What a GPU this process cannot use says: this build's reason, or that none is visible, or
// that the one asked for is beyond those visible, each naming the key, the value and the rank.
TEST(TorchDeviceTest, AGpuThatCannotBeUsedIsAnErrorNamingKeyValueAndRank) {
  const int count = DeviceUnsupportedReason(DeviceSpec{true, 0}).empty()
                        ? static_cast<int>(torch::cuda::device_count())
                        : 0;
  absl::StatusOr<torch::Device> beyond = TorchDevice("trainer.device", "cuda:64", 2);
  ASSERT_FALSE(beyond.ok());
  EXPECT_NE(beyond.status().message().find("trainer.device cuda:64 (rank 2): "), std::string::npos)
      << beyond.status();
  absl::StatusOr<torch::Device> by_rank = TorchDevice("trainer.device", "cuda", 5);
  if (count == 0) {
    ASSERT_FALSE(by_rank.ok());
    EXPECT_NE(by_rank.status().message().find("trainer.device cuda (rank 5): "), std::string::npos)
        << by_rank.status();
  } else {
    ASSERT_TRUE(by_rank.ok()) << by_rank.status();
    EXPECT_EQ(by_rank->index(), 5 % count);
  }
}

}  // namespace
}  // namespace rlforge::models
