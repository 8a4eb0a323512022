#include "weights/weight_sync.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <numeric>

namespace rlforge {
namespace {

std::string Name(const char* tag) { return "rlforge-test-" + std::to_string(getpid()) + tag; }

TEST(WeightSyncTest, ReaderGetsEachPublishedVersionExactly) {
  std::vector<float> w(1000);
  auto pub = WeightPublisher::Create(Name("a"), w.size() * 4, 77);
  ASSERT_TRUE(pub.ok()) << pub.status();
  WeightReader reader;
  for (int64_t v = 0; v < 5; ++v) {
    std::iota(w.begin(), w.end(), static_cast<float>(v));
    proto::WeightsReady ready = pub->Publish(v, w.data());
    EXPECT_EQ(ready.version(), v);
    std::vector<float> got(w.size());
    ASSERT_TRUE(reader.Read(ready, 77, got.data()).ok());
    EXPECT_EQ(got, w);
  }
}

TEST(WeightSyncTest, StaleVersionLayoutMismatchAndCorruptionAreRefused) {
  std::vector<float> w(64, 1.f);
  auto pub = WeightPublisher::Create(Name("b"), w.size() * 4, 5);
  ASSERT_TRUE(pub.ok());
  proto::WeightsReady v0 = pub->Publish(0, w.data());
  pub->Publish(1, w.data());
  pub->Publish(2, w.data());  // overwrites version 0's slot
  WeightReader reader;
  std::vector<float> got(w.size());
  absl::Status s = reader.Read(v0, 5, got.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("its slot holds 2"), std::string::npos) << s;
  proto::WeightsReady v2 = pub->Publish(2, w.data());
  EXPECT_EQ(reader.Read(v2, 6, got.data()).code(), absl::StatusCode::kFailedPrecondition);
  v2.set_checksum(v2.checksum() + 1);
  EXPECT_EQ(reader.Read(v2, 5, got.data()).code(), absl::StatusCode::kDataLoss);
}

TEST(WeightSyncTest, MissingSegmentSuggestsTheZmqTransport) {
  proto::WeightsReady r;
  r.set_location("shm:/rlforge-does-not-exist");
  WeightReader reader;
  float x;
  absl::Status s = reader.Read(r, 0, &x);
  EXPECT_NE(s.message().find("weights.transport: zmq"), std::string::npos) << s;
}

TEST(WeightSyncTest, PublisherUnlinksItsSegment) {
  std::string name = Name("c");
  { ASSERT_TRUE(WeightPublisher::Create(name, 16, 0).ok()); }
  proto::WeightsReady r;
  r.set_location("shm:/" + name);
  WeightReader reader;
  float x[4];
  EXPECT_FALSE(reader.Read(r, 0, x).ok());
}

}  // namespace
}  // namespace rlforge
