// The shm ring's publications: the current version streamed again to a new engine (the
// engine that replaces a lost one), tags by publication number so no reader takes an earlier
// stream's copy, and the numbers' order enforced on both sides; a reader killed mid-stream does
// not hold the others.
#include "weights/shm_ring.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "weights/bucket_stream.h"

namespace rlforge {
namespace {

std::string RingName(const char* tag) {
  return "/rlforge-test-pub-" + std::to_string(getpid()) + tag;
}

// One tensor of 100 floats, all `value`: a stream of `buckets` buckets.
struct Weights {
  std::vector<float> values = std::vector<float>(100);
  proto::WeightManifest manifest;

  explicit Weights(uint64_t bucket_bytes)
      : manifest(MakeManifest({{"w", {100}}}, "float32", bucket_bytes)) {}
  void Fill(float v) { std::fill(values.begin(), values.end(), v); }
};

absl::Status Publish(ShmRingSink& sink, const Weights& w, int64_t version) {
  BucketWriter writer(w.manifest, sink, version);
  if (absl::Status s = writer.Append("w", w.values.data(), 100); !s.ok()) return s;
  return writer.Finish().status();
}

// A fresh engine's read of `version` as publication `publication`: its values.
absl::StatusOr<std::vector<float>> Read(const std::string& location, const Weights& w,
                                        int64_t publication, int64_t version, double timeout_s,
                                        int reader = 0) {
  auto source = ShmRingSource::Open(location, timeout_s);
  if (!source.ok()) return source.status();
  (*source)->set_publication(publication, reader);
  std::vector<float> mine(100, -1.f);
  auto dest = MatchDestinations(w.manifest, {{"w", {100}, mine.data()}}, "rollout-0");
  if (!dest.ok()) return dest.status();
  auto stats = ReadVersion(w.manifest, version, **source, *dest, "rollout-0");
  if (!stats.ok()) return stats.status();
  return mine;
}

// Streams `version` as `publication` to one reader (a thread) and returns what it read.
absl::StatusOr<std::vector<float>> StreamToOne(ShmRingSink& sink, const Weights& w,
                                               int64_t publication, int64_t version) {
  if (absl::Status s = sink.BeginPublication(publication, 1); !s.ok()) return s;
  absl::Status written;
  std::thread publisher([&] { written = Publish(sink, w, version); });
  auto read = Read(sink.location(), w, publication, version, 20);
  publisher.join();
  if (!written.ok()) return written;
  return read;
}

// The regression of issue 42: the only engine lost, its replacement must load the version the
// ring carried already. The trainer streams it again under a new publication number, to the
// new engine alone, and a reader waiting for that number never takes the earlier stream's
// buckets (one bucket here, so the slot still holds (version 3, bucket 0) of publication 1:
// a tag of (version, bucket) would have matched it).
TEST(ShmRingPublicationTest, TheCurrentVersionStreamsAgainToAReplacementEngine) {
  for (uint64_t bucket_bytes : {448u, 128u}) {  // the whole stream in one bucket; four buckets
    SCOPED_TRACE(bucket_bytes);
    Weights w(bucket_bytes);
    ASSERT_EQ(BucketCount(w.manifest), bucket_bytes == 448 ? 1 : 4);
    auto sink = ShmRingSink::Create(RingName(bucket_bytes == 448 ? "a" : "b"),
                                    w.manifest.bucket_bytes(), 20);
    ASSERT_TRUE(sink.ok()) << sink.status();
    w.Fill(1.5f);
    auto first = StreamToOne(**sink, w, /*publication=*/1, /*version=*/3);
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_EQ(*first, w.values);

    // The engine that read it is lost. Before the trainer streams again, a replacement waiting
    // for publication 2 takes nothing: it meets its deadline.
    auto early = Read((*sink)->location(), w, 2, 3, 0.2);
    EXPECT_EQ(early.status().code(), absl::StatusCode::kDeadlineExceeded) << early.status();

    // The same version streamed again (other values, so a stale bucket would show) reaches it.
    w.Fill(2.5f);
    auto again = StreamToOne(**sink, w, 2, 3);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(*again, w.values);

    // A reader of publication 1 now was not counted among any stream's readers: refused.
    auto late = Read((*sink)->location(), w, 1, 3, 20);
    EXPECT_EQ(late.status().code(), absl::StatusCode::kFailedPrecondition) << late.status();
    EXPECT_NE(late.status().message().find(
                  "the ring already holds publication 2 (weight version 3), past publication 1"),
              std::string::npos)
        << late.status();
  }
}

TEST(ShmRingPublicationTest, EachStreamNeedsANumberAboveEveryEarlierOne) {
  Weights w(128);
  auto sink = ShmRingSink::Create(RingName("c"), 128, 20);
  ASSERT_TRUE(sink.ok()) << sink.status();
  // No publication begun: the writer's first bucket is refused.
  absl::Status none = Publish(**sink, w, 1);
  EXPECT_EQ(none.code(), absl::StatusCode::kFailedPrecondition) << none;
  EXPECT_NE(none.message().find("without a publication of its own (none begun)"), std::string::npos)
      << none;
  ASSERT_TRUE(StreamToOne(**sink, w, 4, 1).ok());
  // Publication 4 was streamed: a second stream under it, or under a lower number, is refused.
  absl::Status twice = Publish(**sink, w, 2);
  EXPECT_NE(twice.message().find("(publication 4 streamed already)"), std::string::npos) << twice;
  absl::Status lower = (*sink)->BeginPublication(4, 1);
  EXPECT_EQ(lower.code(), absl::StatusCode::kFailedPrecondition) << lower;
  EXPECT_NE(lower.message().find("weight publication 4 after publication 4"), std::string::npos)
      << lower;
  EXPECT_FALSE((*sink)->BeginPublication(3, 1).ok());
  EXPECT_TRUE((*sink)->BeginPublication(5, 1).ok());
}

TEST(ShmRingPublicationTest, AReaderWithoutAPublicationNumberOrOfAnotherVersionIsRefused) {
  Weights w(128);
  auto sink = ShmRingSink::Create(RingName("d"), 128, 20);
  ASSERT_TRUE(sink.ok()) << sink.status();
  auto unnumbered = Read((*sink)->location(), w, 0, 1, 20);
  EXPECT_EQ(unnumbered.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(unnumbered.status().message().find("LoadWeights.publication"), std::string::npos)
      << unnumbered.status();
  // Publication 1 carries version 2; a reader told version 7 for it is refused, naming both.
  ASSERT_TRUE((*sink)->BeginPublication(1, 1).ok());
  absl::Status written;
  std::thread publisher([&] { written = Publish(**sink, w, 2); });
  auto other = Read((*sink)->location(), w, 1, 7, 20);
  // The refused reader took no bucket: release the publisher by reading as told.
  auto right = Read((*sink)->location(), w, 1, 2, 20);
  publisher.join();
  EXPECT_NE(other.status().message().find("publication 1 carries weight version 2, not 7"),
            std::string::npos)
      << other.status();
  EXPECT_TRUE(right.ok()) << right.status();
  EXPECT_TRUE(written.ok()) << written;
}

// An engine lost mid-stream is killed by the controller; its process gone, the sink stops
// waiting for it and the stream goes on for the other reader (before, the trainer waited for
// its bucket until weights.timeout_s and failed the job).
TEST(ShmRingPublicationTest, AReaderKilledMidStreamDoesNotHoldTheOthers) {
  Weights w(128);  // four buckets: the writer needs bucket 0's slot again for bucket 2
  auto sink = ShmRingSink::Create(RingName("e"), w.manifest.bucket_bytes(), 20);
  ASSERT_TRUE(sink.ok()) << sink.status();
  const std::string location = (*sink)->location();
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  if (child == 0) {  // reader 1: holds bucket 0 and never lets go, until killed
    auto source = ShmRingSource::Open(location, 20);
    if (!source.ok()) _exit(2);
    (*source)->set_publication(1, 1);
    if (!(*source)->Next(1, 0).ok()) _exit(3);
    (void)!write(ready[1], "x", 1);
    pause();
    _exit(0);
  }
  ASSERT_TRUE((*sink)->BeginPublication(1, 2, {getpid(), child}).ok());
  w.Fill(0.75f);
  absl::Status written;
  std::thread publisher([&] { written = Publish(**sink, w, 1); });
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1) << "the child took bucket 0";
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  auto read0 = Read(location, w, 1, 1, 20, /*reader=*/0);
  publisher.join();
  ASSERT_TRUE(written.ok()) << written;
  ASSERT_TRUE(read0.ok()) << read0.status();
  EXPECT_EQ(*read0, w.values);
  close(ready[0]);
  close(ready[1]);
}

}  // namespace
}  // namespace rlforge
