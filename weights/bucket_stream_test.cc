#include "weights/bucket_stream.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "dist/local_group.h"
#include "weights/dying_publisher_testing.h"
#include "weights/gloo_plane.h"
#include "weights/shm_mapped.h"
#include "weights/shm_ring.h"

namespace rlforge {
namespace {

// A model of a few tensors whose sizes straddle bucket boundaries.
struct Model {
  std::vector<TensorSpec> specs;
  std::vector<std::vector<float>> values;

  explicit Model(uint32_t seed) {
    specs = {{"embed", {37, 8}}, {"layer.0.w", {8, 8}}, {"layer.0.b", {8}}, {"head", {5, 8}}};
    std::mt19937 gen(seed);
    std::normal_distribution<float> d;
    for (const TensorSpec& s : specs) {
      int64_t n = 1;
      for (int64_t x : s.shape) n *= x;
      std::vector<float> v(static_cast<size_t>(n));
      for (float& f : v) f = d(gen);
      values.push_back(std::move(v));
    }
  }
  std::vector<Destination> Destinations() {
    std::vector<Destination> out;
    for (size_t i = 0; i < specs.size(); ++i) {
      out.push_back({specs[i].name, specs[i].shape, values[i].data()});
    }
    return out;
  }
  void Zero() {
    for (auto& v : values) std::fill(v.begin(), v.end(), 0.f);
  }
};

absl::StatusOr<std::vector<uint64_t>> Write(const proto::WeightManifest& m, Model& model,
                                            BucketSink& sink, int64_t version) {
  BucketWriter w(m, sink, version);
  for (size_t i = 0; i < model.specs.size(); ++i) {
    absl::Status s = w.Append(model.specs[i].name, model.values[i].data(),
                              static_cast<int64_t>(model.values[i].size()));
    if (!s.ok()) return s;
  }
  return w.Finish();
}

std::string ShmName(const char* tag) {
  return "/rlforge-test-ring-" + std::to_string(getpid()) + tag;
}

TEST(BucketStreamTest, Float32RoundTripsExactlyThroughBucketsThatSplitTensors) {
  Model src(1), dst(2);
  const proto::WeightManifest m = MakeManifest(src.specs, "float32", 128);
  EXPECT_EQ(m.total_bytes(), (37 * 8 + 64 + 8 + 40) * 4u);
  EXPECT_EQ(BucketCount(m), static_cast<int64_t>((m.total_bytes() + 127) / 128));
  std::vector<char> stream(m.total_bytes());
  MemorySink sink(m, stream.data());
  auto sums = Write(m, src, sink, 3);
  ASSERT_TRUE(sums.ok()) << sums.status();
  ASSERT_EQ(static_cast<int64_t>(sums->size()), BucketCount(m));
  MemorySource source(m, stream.data(), *sums);
  auto dest = MatchDestinations(m, dst.Destinations(), "engine rollout-0");
  ASSERT_TRUE(dest.ok()) << dest.status();
  auto stats = ReadVersion(m, 3, source, *dest, "engine rollout-0");
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->bytes, m.total_bytes());
  EXPECT_EQ(dst.values, src.values);
}

TEST(BucketStreamTest, Bfloat16RoundsToNearestEvenAndHalvesTheBytes) {
  Model src(1), dst(2);
  src.values[0][0] = 1.0f + 1.0f / 256;  // halfway between two bf16: rounds to even (1.0)
  src.values[0][1] = 1.0f + 3.0f / 256;  // halfway: rounds up to even
  src.values[0][2] = std::nanf("");
  const proto::WeightManifest m = MakeManifest(src.specs, "bfloat16", 64);
  EXPECT_EQ(m.total_bytes(), (37 * 8 + 64 + 8 + 40) * 2u);
  std::vector<char> stream(m.total_bytes());
  MemorySink sink(m, stream.data());
  auto sums = Write(m, src, sink, 1);
  ASSERT_TRUE(sums.ok());
  MemorySource source(m, stream.data(), *sums);
  auto dest = MatchDestinations(m, dst.Destinations(), "e");
  ASSERT_TRUE(ReadVersion(m, 1, source, *dest, "e").ok());
  EXPECT_EQ(dst.values[0][0], 1.0f);
  EXPECT_EQ(dst.values[0][1], 1.0f + 4.0f / 256);
  EXPECT_TRUE(std::isnan(dst.values[0][2]));
  for (size_t t = 0; t < src.values.size(); ++t) {
    for (size_t i = 3; i < src.values[t].size(); ++i) {
      EXPECT_NEAR(dst.values[t][i], src.values[t][i], std::abs(src.values[t][i]) / 128);
    }
  }
}

TEST(BucketStreamTest, CorruptedBucketIsRefusedNamingEngineVersionAndBucket) {
  Model src(1), dst(2);
  const proto::WeightManifest m = MakeManifest(src.specs, "float32", 256);
  std::vector<char> stream(m.total_bytes());
  MemorySink sink(m, stream.data());
  auto sums = Write(m, src, sink, 7);
  ASSERT_TRUE(sums.ok());
  stream[256 * 2 + 5] ^= 0x10;  // one bit of bucket 2
  MemorySource source(m, stream.data(), *sums);
  auto dest = MatchDestinations(m, dst.Destinations(), "rollout-1");
  auto stats = ReadVersion(m, 7, source, *dest, "rollout-1");
  ASSERT_FALSE(stats.ok());
  EXPECT_EQ(stats.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(stats.status().message().find("rollout-1 refused weight version 7: bucket 2 of "),
            std::string::npos)
      << stats.status();
}

TEST(BucketStreamTest, ManifestOfAnotherModelIsRefusedNamingTheTensor) {
  Model src(1), dst(2);
  const proto::WeightManifest m = MakeManifest(src.specs, "float32", 256);
  dst.specs[3].shape = {6, 8};
  dst.values[3].resize(48);
  auto d = MatchDestinations(m, dst.Destinations(), "rollout-0");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("tensor 'head' is [5, 8] in the stream but [6, 8]"),
            std::string::npos)
      << d.status();
  dst.specs[3].name = "lm_head";
  d = MatchDestinations(m, dst.Destinations(), "rollout-0");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("'head'"), std::string::npos) << d.status();
}

TEST(BucketStreamTest, WriterRefusesTensorsOutOfOrder) {
  Model src(1);
  const proto::WeightManifest m = MakeManifest(src.specs, "float32", 256);
  std::vector<char> stream(m.total_bytes());
  MemorySink sink(m, stream.data());
  BucketWriter w(m, sink, 1);
  EXPECT_FALSE(w.Append("head", src.values[3].data(), 40).ok());
}

// Two engines read every version from the ring while the publisher writes it, bucket by bucket
// through two slots.
TEST(ShmRingTest, TwoReadersGetEveryVersionThroughTwoSlots) {
  Model src(1);
  const proto::WeightManifest m = MakeManifest(src.specs, "float32", 192);
  ASSERT_GT(BucketCount(m), 4);
  auto sink = ShmRingSink::Create(ShmName("a"), m.bucket_bytes(), 20);
  ASSERT_TRUE(sink.ok()) << sink.status();
  for (int64_t version = 1; version <= 3; ++version) {
    ASSERT_TRUE((*sink)->BeginPublication(version, 2).ok());
    for (auto& v : src.values) {
      for (float& f : v) f += 1;
    }
    std::vector<Model> engines = {Model(5), Model(6)};
    std::vector<absl::Status> results(2);
    std::vector<std::thread> readers;
    for (int e = 0; e < 2; ++e) {
      readers.emplace_back([&, e] {
        auto source = ShmRingSource::Open((*sink)->location(), 20);
        if (!source.ok()) {
          results[e] = source.status();
          return;
        }
        (*source)->set_publication(version, e);  // reader e of the 2
        auto dest = MatchDestinations(m, engines[e].Destinations(), "e");
        auto stats = ReadVersion(m, version, **source, *dest, "e");
        results[e] = stats.status();
      });
    }
    auto sums = Write(m, src, **sink, version);
    for (auto& t : readers) t.join();
    ASSERT_TRUE(sums.ok()) << sums.status();
    for (int e = 0; e < 2; ++e) {
      ASSERT_TRUE(results[e].ok()) << results[e];
      EXPECT_EQ(engines[e].values, src.values) << "engine " << e << " version " << version;
    }
  }
}

TEST(ShmRingTest, PublisherKilledMidTransferIsReportedAtOnceNamingTheBucket) {
  Model src(1), dst(2);
  const proto::WeightManifest m = MakeManifest(src.specs, "float32", 128);
  const std::string name = ShmName("b");
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  if (child == 0) {  // the publisher: commits bucket 0, then waits to be killed
    auto sink = ShmRingSink::Create(name, m.bucket_bytes(), 20);
    if (!sink.ok()) _exit(2);
    if (!(*sink)->BeginPublication(1, 1).ok()) _exit(3);
    auto buf = (*sink)->Acquire(4, 0);
    std::memset(*buf, 0, m.bucket_bytes());
    (*sink)->Commit(4, 0, m.bucket_bytes(), BucketChecksum(*buf, m.bucket_bytes())).IgnoreError();
    (void)!write(ready[1], "x", 1);
    pause();
    _exit(0);
  }
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  auto source = ShmRingSource::Open("shm-ring:" + name, 20);
  ASSERT_TRUE(source.ok()) << source.status();
  (*source)->set_publication(1);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  auto dest = MatchDestinations(m, dst.Destinations(), "rollout-0");
  auto stats = ReadVersion(m, 4, **source, *dest, "rollout-0");
  ASSERT_FALSE(stats.ok());
  EXPECT_NE(stats.status().message().find("rollout-0 could not load weight version 4: bucket 1 of"),
            std::string::npos)
      << stats.status();
  EXPECT_NE(stats.status().message().find("exited mid-transfer"), std::string::npos)
      << stats.status();
  shm_unlink(name.c_str());
}

TEST(ShmRingTest, ReaderWithoutPublisherWaitsOnlyUntilItsDeadline) {
  Model src(1), dst(2);
  const proto::WeightManifest m = MakeManifest(src.specs, "float32", 128);
  auto sink = ShmRingSink::Create(ShmName("c"), m.bucket_bytes(), 20);
  ASSERT_TRUE(sink.ok());
  auto source = ShmRingSource::Open((*sink)->location(), 0.2);
  ASSERT_TRUE(source.ok());
  (*source)->set_publication(1);
  auto dest = MatchDestinations(m, dst.Destinations(), "e");
  auto stats = ReadVersion(m, 1, **source, *dest, "e");
  EXPECT_EQ(stats.status().code(), absl::StatusCode::kDeadlineExceeded) << stats.status();
}

TEST(ShmRingTest, PublisherWaitsForAMissingReaderOnlyUntilItsDeadline) {
  Model src(1);
  const proto::WeightManifest m = MakeManifest(src.specs, "float32", 128);
  auto sink = ShmRingSink::Create(ShmName("d"), m.bucket_bytes(), 0.2);
  ASSERT_TRUE(sink.ok());
  ASSERT_TRUE((*sink)->BeginPublication(1, 1).ok());
  auto sums = Write(m, src, **sink, 1);  // nobody reads: the third bucket cannot be written
  ASSERT_FALSE(sums.ok());
  EXPECT_NE(sums.status().message().find(
                "did not take bucket 0 of weight version 1 (publication 1; 0 of 1"),
            std::string::npos)
      << sums.status();
}

// --- weights.apply: mapped

// The tensors an engine serving from `base` sees, as the model's values.
bool Serves(const proto::WeightManifest& m, const char* base, const Model& model) {
  for (int i = 0; i < m.tensors_size(); ++i) {
    const auto& v = model.values[static_cast<size_t>(i)];
    if (std::memcmp(base + m.tensors(i).offset(), v.data(), v.size() * 4) != 0) return false;
  }
  return true;
}

// An engine's load: check every bucket in place, hold the slot, point at it, serve it.
absl::StatusOr<const char*> LoadMapped(MappedSource& e, const proto::WeightManifest& m,
                                       int64_t version) {
  ReadStats stats;
  absl::StatusOr<const char*> base = e.Check(m, version, &stats);
  if (!base.ok()) return base;
  if (absl::Status s = e.Hold(version); !s.ok()) return s;
  e.Serve(version);
  return base;
}

void Bump(Model& model) {
  for (auto& v : model.values) {
    for (float& f : v) f += 1;
  }
}

// Flips one bit of `bucket` after the writer checksummed it.
class CorruptingSink final : public BucketSink {
 public:
  CorruptingSink(BucketSink& inner, int64_t bucket) : inner_(inner), bucket_(bucket) {}
  absl::StatusOr<char*> Acquire(int64_t version, int64_t bucket) override {
    auto buf = inner_.Acquire(version, bucket);
    if (buf.ok()) buf_ = *buf;
    return buf;
  }
  absl::Status Commit(int64_t version, int64_t bucket, uint64_t nbytes, uint64_t sum) override {
    if (bucket == bucket_) buf_[5] ^= 0x10;
    return inner_.Commit(version, bucket, nbytes, sum);
  }
  absl::Status Drain() override { return inner_.Drain(); }

 private:
  BucketSink& inner_;
  int64_t bucket_;
  char* buf_ = nullptr;
};

class ShmMappedMappingTest : public ::testing::TestWithParam<MappedSink::Mapping> {};

TEST_P(ShmMappedMappingTest, TwoReadersServeThreeVersionsThroughTwoSlotsWithoutACopy) {
  Model src(1);
  const proto::WeightManifest m = MakeManifest(src.specs, "float32", 192);  // not page-aligned
  ASSERT_GT(BucketCount(m), 4);
  auto sink = MappedSink::Create(ShmName("ma"), m, 20, GetParam());
  ASSERT_TRUE(sink.ok()) << sink.status();
  std::vector<std::unique_ptr<MappedSource>> engines;
  for (const char* who : {"rollout-0", "rollout-1"}) {
    auto e = MappedSource::Open((*sink)->location(), who, 20);
    ASSERT_TRUE(e.ok()) << e.status();
    engines.push_back(std::move(*e));
  }
  for (int64_t version = 1; version <= 3; ++version) {
    Bump(src);
    std::vector<absl::StatusOr<const char*>> got(2, absl::UnknownError("not run"));
    std::vector<std::thread> readers;
    for (int e = 0; e < 2; ++e) {
      readers.emplace_back([&, e] { got[e] = LoadMapped(*engines[e], m, version); });
    }
    auto sums = Write(m, src, **sink, version);  // the readers check bucket b while b+1 is written
    for (auto& t : readers) t.join();
    ASSERT_TRUE(sums.ok()) << sums.status();
    for (int e = 0; e < 2; ++e) {
      ASSERT_TRUE(got[e].ok()) << got[e].status();
      EXPECT_EQ(*got[e], engines[e]->SlotRange(version).first) << "slot " << version % 2;
      EXPECT_TRUE(Serves(m, *got[e], src)) << "engine " << e << " version " << version;
    }
  }
  // Versions go through once each, in order.
  EXPECT_FALSE(Write(m, src, **sink, 3).ok());
}

INSTANTIATE_TEST_SUITE_P(PublisherMaps, ShmMappedMappingTest,
                         ::testing::Values(MappedSink::Mapping::kWholeSegment,
                                           MappedSink::Mapping::kBucketWindows));

TEST(ShmMappedTest, FlippedBitIsRefusedNamingEngineVersionAndBucketAndTheEngineKeepsServing) {
  Model src(1), v1(1);
  const proto::WeightManifest m = MakeManifest(src.specs, "float32", 128);
  auto sink = MappedSink::Create(ShmName("mb"), m, 20);
  ASSERT_TRUE(sink.ok()) << sink.status();
  auto engine = MappedSource::Open((*sink)->location(), "rollout-1", 20);
  ASSERT_TRUE(engine.ok()) << engine.status();
  Bump(v1);
  ASSERT_TRUE(Write(m, v1, **sink, 1).ok());
  auto served = LoadMapped(**engine, m, 1);
  ASSERT_TRUE(served.ok()) << served.status();
  src = v1;
  Bump(src);
  CorruptingSink corrupt(**sink, 2);
  ASSERT_TRUE(Write(m, src, corrupt, 2).ok());
  auto refused = LoadMapped(**engine, m, 2);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(refused.status().message().find("rollout-1 refused weight version 2: bucket 2 of "),
            std::string::npos)
      << refused.status();
  EXPECT_NE(refused.status().message().find("failed its checksum"), std::string::npos);
  // A second engine takes the first one's verdict on the same pages, and refuses too.
  auto other = MappedSource::Open((*sink)->location(), "rollout-2", 20);
  ASSERT_TRUE(other.ok());
  auto also = LoadMapped(**other, m, 2);
  ASSERT_FALSE(also.ok());
  EXPECT_NE(also.status().message().find("rollout-2 refused weight version 2: bucket 2 of "),
            std::string::npos)
      << also.status();
  // Still on version 1, untouched, and still holding its slot.
  EXPECT_TRUE(Serves(m, *served, v1));
  auto again = Write(m, src, **sink, 2);
  EXPECT_FALSE(again.ok());  // once each
}

TEST(ShmMappedTest, EngineThatNeverLetsGoFailsThePublishersWaitByTheDeadlineNamingIt) {
  Model src(1);
  const proto::WeightManifest m = MakeManifest(src.specs, "float32", 128);
  auto sink = MappedSink::Create(ShmName("mc"), m, 0.3);
  ASSERT_TRUE(sink.ok()) << sink.status();
  auto engine = MappedSource::Open((*sink)->location(), "rollout-7", 20);
  ASSERT_TRUE(engine.ok());
  ASSERT_TRUE(Write(m, src, **sink, 1).ok());
  ASSERT_TRUE(LoadMapped(**engine, m, 1).ok());
  ASSERT_TRUE(Write(m, src, **sink, 2).ok());  // the other slot: no wait
  auto blocked = Write(m, src, **sink, 3);     // slot 1, which rollout-7 still serves
  ASSERT_FALSE(blocked.ok());
  EXPECT_EQ(blocked.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(blocked.status().message().find("weight version 3 cannot be written into its "
                                            "shared-memory slot 1: engine(s) rollout-7 (pid " +
                                            std::to_string(getpid()) + ")"),
            std::string::npos)
      << blocked.status();
  EXPECT_NE(blocked.status().message().find("weights.timeout_s"), std::string::npos);
}

// A version checked but not yet held when a newer one takes its slot is never served.
TEST(ShmMappedTest, SlotTakenByANewerVersionAfterTheCheckIsRefused) {
  Model src(1);
  const proto::WeightManifest m = MakeManifest(src.specs, "float32", 128);
  auto sink = MappedSink::Create(ShmName("mg"), m, 5);
  ASSERT_TRUE(sink.ok()) << sink.status();
  auto engine = MappedSource::Open((*sink)->location(), "rollout-4", 5);
  ASSERT_TRUE(engine.ok());
  ASSERT_TRUE(Write(m, src, **sink, 1).ok());
  ReadStats stats;
  ASSERT_TRUE((*engine)->Check(m, 1, &stats).ok());
  ASSERT_TRUE(Write(m, src, **sink, 2).ok());
  ASSERT_TRUE(Write(m, src, **sink, 3).ok());  // slot 1: nobody holds it yet
  absl::Status held = (*engine)->Hold(1);
  EXPECT_EQ(held.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(held.message().find("rollout-4 could not load weight version 1: version 3 took its "
                                "shared-memory slot after it was checked"),
            std::string::npos)
      << held;
  auto late = (*engine)->Check(m, 1, &stats);
  ASSERT_FALSE(late.ok());
  EXPECT_NE(late.status().message().find("bucket 0 of"), std::string::npos) << late.status();
  EXPECT_NE(late.status().message().find("version 3 took its slot first"), std::string::npos)
      << late.status();
  // The failed Hold left nothing held; loads move it from slot to slot, freeing the one left.
  ASSERT_TRUE(LoadMapped(**engine, m, 3).ok());
  ASSERT_TRUE(Write(m, src, **sink, 4).ok());
  ASSERT_TRUE(LoadMapped(**engine, m, 4).ok());
  EXPECT_TRUE(Write(m, src, **sink, 5).ok());
}

// Another engine killed while it checks buckets for everyone (128 MiB in 4 MiB buckets, killed
// a few ms in, mid-way in practice) leaves no bucket stuck: this one takes the checks over.
TEST(ShmMappedTest, EngineKilledWhileCheckingForTheOthersLeavesNoBucketStuck) {
  const int64_t n = 32 << 20;
  std::vector<float> big(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) big[static_cast<size_t>(i)] = static_cast<float>(i % 977);
  const proto::WeightManifest m = MakeManifest({{"big", {n}}}, "float32", 4 << 20);
  auto sink = MappedSink::Create(ShmName("mh"), m, 5);
  ASSERT_TRUE(sink.ok()) << sink.status();
  BucketWriter writer(m, **sink, 1);
  ASSERT_TRUE(writer.Append("big", big.data(), n).ok());
  ASSERT_TRUE(writer.Finish().ok());
  const std::string where = (*sink)->location();
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  if (child == 0) {
    auto e = MappedSource::Open(where, "rollout-5", 5);
    (void)!write(ready[1], "x", 1);
    ReadStats stats;
    if (e.ok()) (*e)->Check(m, 1, &stats).IgnoreError();
    pause();
    _exit(0);
  }
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  auto engine = MappedSource::Open(where, "rollout-6", 5);
  ASSERT_TRUE(engine.ok());
  auto base = LoadMapped(**engine, m, 1);
  ASSERT_TRUE(base.ok()) << base.status();
  EXPECT_EQ(std::memcmp(*base, big.data(), big.size() * 4), 0);
}

TEST(ShmMappedTest, KilledEngineHoldsNoSlot) {
  Model src(1);
  const proto::WeightManifest m = MakeManifest(src.specs, "float32", 128);
  auto sink = MappedSink::Create(ShmName("md"), m, 5);
  ASSERT_TRUE(sink.ok()) << sink.status();
  ASSERT_TRUE(Write(m, src, **sink, 1).ok());
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const std::string where = (*sink)->location();
  const pid_t child = fork();
  if (child == 0) {  // an engine that serves version 1, then is killed
    auto e = MappedSource::Open(where, "rollout-3", 5);
    if (!e.ok() || !LoadMapped(**e, m, 1).ok()) _exit(2);
    (void)!write(ready[1], "x", 1);
    pause();
    _exit(0);
  }
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  ASSERT_TRUE(Write(m, src, **sink, 2).ok());
  auto sums = Write(m, src, **sink, 3);  // slot 1: held by nobody alive
  EXPECT_TRUE(sums.ok()) << sums.status();
}

TEST(ShmMappedTest, PublisherKilledMidTransferLeavesTheEngineOnItsVersion) {
  Model v1(1), v2(2);
  const proto::WeightManifest m = MakeManifest(v1.specs, "float32", 128);
  const std::string name = ShmName("me");
  DyingPublisher publisher([&] { return MappedSink::Create(name, m, 20); }, m,
                           [&](BucketSink& sink) { return Write(m, v1, sink, 1).status(); }, 2);
  ASSERT_TRUE(publisher.started());
  auto engine = MappedSource::Open("shm-mapped:" + name, "rollout-0", 20);
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto served = LoadMapped(**engine, m, 1);
  ASSERT_TRUE(served.ok()) << served.status();
  ASSERT_TRUE(publisher.Cut());
  auto failed = LoadMapped(**engine, m, 2);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(
      failed.status().message().find("rollout-0 could not load weight version 2: bucket 1 of"),
      std::string::npos)
      << failed.status();
  EXPECT_NE(failed.status().message().find("exited mid-transfer"), std::string::npos);
  EXPECT_TRUE(Serves(m, *served, v1));
  shm_unlink(name.c_str());
}

TEST(ShmMappedTest, RefusesBfloat16OnTheWire) {
  Model src(1);
  auto sink = MappedSink::Create(ShmName("mf"), MakeManifest(src.specs, "bfloat16", 128), 1);
  ASSERT_FALSE(sink.ok());
  EXPECT_NE(sink.status().message().find("weights.dtype is bfloat16"), std::string::npos)
      << sink.status();
}

TEST(GlooPlaneTest, BroadcastGroupDeliversEveryBucketToEveryEngine) {
  Model src(1);
  const proto::WeightManifest m = MakeManifest(src.specs, "bfloat16", 64);
  std::vector<Model> engines = {Model(5), Model(6)};
  std::vector<absl::Status> results(3);
  absl::Status run = dist::RunLocalGroup(3, [&](dist::Communicator& comm) {
    const int r = comm.rank();
    for (int64_t version = 1; version <= 2; ++version) {
      if (r == 0) {
        GlooBroadcastSink sink(&comm, m.bucket_bytes());
        results[0] = Write(m, src, sink, version).status();
      } else {
        GlooBroadcastSource source(&comm, m.bucket_bytes());
        auto dest = MatchDestinations(m, engines[r - 1].Destinations(), "e");
        results[r] = ReadVersion(m, version, source, *dest, "e").status();
      }
    }
  });
  ASSERT_TRUE(run.ok()) << run;
  for (const auto& s : results) EXPECT_TRUE(s.ok()) << s;
  for (Model& e : engines) {
    for (size_t t = 0; t < src.values.size(); ++t) {
      for (size_t i = 0; i < src.values[t].size(); ++i) {
        EXPECT_NEAR(e.values[t][i], src.values[t][i], std::abs(src.values[t][i]) / 128);
      }
    }
  }
}

}  // namespace
}  // namespace rlforge
