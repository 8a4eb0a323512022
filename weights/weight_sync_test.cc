#include "weights/weight_sync.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <numeric>

#include "weights/shm_segment.h"

namespace rlforge {
namespace {

bool SegmentExists(const std::string& name) {
  const int fd = shm_open(name.c_str(), O_RDONLY, 0);
  if (fd >= 0) close(fd);
  return fd >= 0;
}

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

TEST(WeightSyncTest, APublisherKilledWithoutUnlinkingIsSweptByTheNextOne) {
  // A child that exited plays the killed publisher: its pid is gone, its segment is not.
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  const std::string dead = "/rlforge-w-" + std::to_string(child) + "-trainer-test";
  auto orphan = CreateSegment(dead, 4096);
  ASSERT_TRUE(orphan.ok()) << orphan.status();
  munmap(orphan->base, orphan->size);
  const std::string mine = PublisherSegmentName("trainer-test");
  EXPECT_EQ(mine, "/rlforge-w-" + std::to_string(getpid()) + "-trainer-test");
  auto live = CreateSegment(mine, 4096);
  ASSERT_TRUE(live.ok()) << live.status();
  EXPECT_FALSE(SegmentExists(dead)) << "the dead publisher's segment was left";
  PublisherSegmentName("other");  // a live publisher's segment is never swept
  EXPECT_TRUE(SegmentExists(mine));
  munmap(live->base, live->size);
  shm_unlink(mine.c_str());
}

}  // namespace
}  // namespace rlforge
