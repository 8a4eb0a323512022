#include "weights/policy_plane.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"

namespace rlforge {
namespace {

// A small policy's flat vector: three tensors, 30 floats (120 bytes).
const std::vector<TensorSpec>& Specs() {
  static const std::vector<TensorSpec> specs = {
      {"actor.0.weight", {3, 5}}, {"actor.0.bias", {7}}, {"obs_mean", {2, 2, 2}}};
  return specs;
}

std::vector<float> Values(int64_t version) {
  std::mt19937 rng(static_cast<uint32_t>(version) + 17);
  std::normal_distribution<float> normal;
  std::vector<float> v(30);
  for (float& x : v) x = normal(rng);
  return v;
}

PolicyStreamOptions Options(uint64_t bucket_bytes) {
  static int n = 0;
  PolicyStreamOptions o;
  o.segment = absl::StrCat("/rlforge-policy-plane-test-", getpid(), "-", ++n);
  o.tensors = Specs();
  o.layout_hash = 42;
  o.bucket_bytes = bucket_bytes;
  o.timeout_s = 5;
  return o;
}

PolicyReader Reader(std::vector<TensorSpec> specs = Specs()) {
  return PolicyReader("rollout-0", std::move(specs), 42, 5);
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Every version arrives bit for bit over shm and zmq, in one bucket or in 64-byte buckets (the
// last shorter).
TEST(PolicyPlaneTest, EveryHostTransportDeliversEachVersionBitForBit) {
  for (WeightTransport t : {WeightTransport::kShm, WeightTransport::kZmq}) {
    for (uint64_t bucket : {uint64_t{64}, uint64_t{1} << 20}) {
      SCOPED_TRACE(absl::StrCat(WeightTransportName(t), ", buckets of ", bucket));
      auto publisher = MakePolicyPublisher(t, Options(bucket));
      ASSERT_TRUE(publisher.ok()) << publisher.status();
      PolicyReader reader = Reader();
      for (int64_t v = 0; v < 4; ++v) {
        const std::vector<float> flat = Values(v);
        auto published = (*publisher)->Publish(v, flat.data());
        ASSERT_TRUE(published.ok()) << published.status();
        EXPECT_EQ(published->ready.bucket_checksums_size(), bucket == 64 ? 2 : 1);
        EXPECT_EQ(published->frames.empty(), t == WeightTransport::kShm);
        std::vector<float> out(flat.size(), -1);
        auto read = reader.Read(published->ready, published->frames, out.data());
        ASSERT_TRUE(read.ok()) << read.status();
        EXPECT_TRUE(SameBits(out, flat)) << "version " << v;
      }
    }
  }
}

// The segment keeps two versions: a late reader still gets the previous one, not the one before.
TEST(PolicyPlaneTest, ShmServesTheLastTwoVersions) {
  auto publisher = MakePolicyPublisher(WeightTransport::kShm, Options(64));
  ASSERT_TRUE(publisher.ok()) << publisher.status();
  std::vector<proto::WeightsReady> ready;
  for (int64_t v = 0; v < 3; ++v) {
    const std::vector<float> flat = Values(v);
    auto published = (*publisher)->Publish(v, flat.data());
    ASSERT_TRUE(published.ok()) << published.status();
    ready.push_back(published->ready);
  }
  PolicyReader reader = Reader();
  std::vector<float> out(30);
  ASSERT_TRUE(reader.Read(ready[1], {}, out.data()).ok());
  EXPECT_TRUE(SameBits(out, Values(1)));
  auto gone = reader.Read(ready[0], {}, out.data());
  ASSERT_FALSE(gone.ok());
  EXPECT_NE(gone.status().message().find("rollout-0 could not load weight version 0"),
            std::string::npos)
      << gone.status();
}

TEST(PolicyPlaneTest, ACorruptBucketIsRefusedNamingIt) {
  auto publisher = MakePolicyPublisher(WeightTransport::kZmq, Options(64));
  ASSERT_TRUE(publisher.ok());
  const std::vector<float> flat = Values(3);
  auto published = (*publisher)->Publish(3, flat.data());
  ASSERT_TRUE(published.ok());
  static_cast<char*>(published->frames[0].data())[70] ^= 1;  // in bucket 1
  std::vector<float> out(30);
  auto read = Reader().Read(published->ready, published->frames, out.data());
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find("bucket 1"), std::string::npos) << read.status();
  EXPECT_NE(read.status().message().find("rollout-0"), std::string::npos) << read.status();
}

TEST(PolicyPlaneTest, AReaderOfAnotherModelIsRefused) {
  auto publisher = MakePolicyPublisher(WeightTransport::kZmq, Options(64));
  ASSERT_TRUE(publisher.ok());
  const std::vector<float> flat = Values(0);
  auto published = (*publisher)->Publish(0, flat.data());
  ASSERT_TRUE(published.ok());
  std::vector<float> out(30);
  std::vector<TensorSpec> other = Specs();
  other[1].shape = {6, 1};
  other.push_back({"extra", {1}});
  auto read = Reader(other).Read(published->ready, published->frames, out.data());
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find("actor.0.bias"), std::string::npos) << read.status();
  published->ready.set_layout_hash(7);
  read = Reader().Read(published->ready, published->frames, out.data());
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find("another model layout"), std::string::npos)
      << read.status();
}

TEST(PolicyPlaneTest, GroupAndDeviceTransportsCarryNoControlPolicy) {
  for (WeightTransport t : {WeightTransport::kGloo, WeightTransport::kNccl,
                            WeightTransport::kCudaIpc, WeightTransport::kAuto}) {
    auto publisher = MakePolicyPublisher(t, Options(64));
    ASSERT_FALSE(publisher.ok());
    EXPECT_NE(publisher.status().message().find("weights.transport: " + WeightTransportName(t)),
              std::string::npos)
        << publisher.status();
  }
}

}  // namespace
}  // namespace rlforge
