// The device path of the weight stream, run on the CPU: the same torch code packs and unpacks
// on a GPU, and the broadcast pair is written against dist::Communicator (gloo here, NCCL there).
#include "weights/device_stream.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "dist/local_group.h"
#include "weights/device_broadcast.h"

namespace rlforge {
namespace {

// Tensors whose sizes straddle bucket boundaries, as the host path's tests use.
struct DeviceModel {
  std::vector<TensorSpec> specs = {
      {"embed", {37, 8}}, {"layer.0.w", {8, 8}}, {"layer.0.b", {8}}, {"head", {5, 8}}};
  std::vector<torch::Tensor> values;

  explicit DeviceModel(uint64_t seed) {
    torch::manual_seed(seed);
    for (const TensorSpec& s : specs) values.push_back(torch::randn(s.shape));
  }
  std::vector<std::pair<std::string, torch::Tensor>> Named() const {
    std::vector<std::pair<std::string, torch::Tensor>> out;
    for (size_t i = 0; i < specs.size(); ++i) out.push_back({specs[i].name, values[i]});
    return out;
  }
};

absl::Status WriteDevice(const proto::WeightManifest& m, const DeviceModel& model,
                         DeviceBucketSink& sink, int64_t version) {
  DeviceBucketWriter w(m, sink, version);
  for (size_t i = 0; i < model.specs.size(); ++i) {
    if (absl::Status s = w.Append(model.specs[i].name, model.values[i]); !s.ok()) return s;
  }
  return w.Finish();
}

// The host writer's stream and checksums for the same values.
std::vector<char> HostStream(const proto::WeightManifest& m, const DeviceModel& model,
                             std::vector<uint64_t>* sums) {
  std::vector<char> stream(m.total_bytes());
  MemorySink sink(m, stream.data());
  BucketWriter w(m, sink, 1);
  for (size_t i = 0; i < model.specs.size(); ++i) {
    const torch::Tensor t = model.values[i].contiguous();
    EXPECT_TRUE(w.Append(model.specs[i].name, t.data_ptr<float>(), t.numel()).ok());
  }
  absl::StatusOr<std::vector<uint64_t>> got = w.Finish();
  EXPECT_TRUE(got.ok()) << got.status();
  *sums = *got;
  return stream;
}

class DevicePackTest : public ::testing::TestWithParam<const char*> {};

TEST_P(DevicePackTest, PacksTheBytesAndChecksumsOfTheHostWriter) {
  DeviceModel src(1);
  auto e = src.values[0].view({-1});
  e[0] = 1.0f + 1.0f / 256;  // bf16 ties: round to even, down then up (NaN: NanStaysNan)
  e[1] = 1.0f + 3.0f / 256;
  e[2] = std::numeric_limits<float>::max();  // rounds up past bf16's largest: infinity
  e[3] = -0.0f;
  const proto::WeightManifest m = MakeManifest(src.specs, GetParam(), 128);
  std::vector<uint64_t> sums;
  const std::vector<char> host = HostStream(m, src, &sums);
  torch::Tensor stream = torch::full({static_cast<int64_t>(m.total_bytes())}, 0xAB, torch::kUInt8);
  WholeStreamSink sink(m, stream);
  ASSERT_TRUE(WriteDevice(m, src, sink, 1).ok());
  const auto* got = static_cast<const unsigned char*>(stream.data_ptr());
  for (size_t i = 0; i < host.size(); ++i) {
    ASSERT_EQ(got[i], static_cast<unsigned char>(host[i])) << "stream byte " << i;
  }
  for (int64_t b = 0; b < BucketCount(m); ++b) {
    const char* bucket = static_cast<const char*>(stream.data_ptr()) + b * m.bucket_bytes();
    EXPECT_EQ(BucketChecksum(bucket, BucketBytes(m, b)), sums[static_cast<size_t>(b)]) << b;
  }
}

// NaN's payload is the one byte pattern allowed to differ from the host writer's (torch picks
// its own quiet NaN): it must stay a NaN on the wire and after unpacking.
TEST_P(DevicePackTest, NanStaysNan) {
  DeviceModel src(1), dst(2);
  src.values[2].view({-1})[5] = std::nanf("");
  const proto::WeightManifest m = MakeManifest(src.specs, GetParam(), 128);
  torch::Tensor stream = torch::zeros({static_cast<int64_t>(m.total_bytes())}, torch::kUInt8);
  WholeStreamSink sink(m, stream);
  ASSERT_TRUE(WriteDevice(m, src, sink, 1).ok());
  WholeStreamSource source(m, stream);
  auto dest = MatchDeviceDestinations(m, dst.Named(), "e");
  ASSERT_TRUE(ReadDeviceVersion(m, 1, source, *dest, "e").ok());
  EXPECT_TRUE(std::isnan(dst.values[2][5].item<float>()));
  EXPECT_EQ(torch::isnan(dst.values[2]).sum().item<int64_t>(), 1);
}

TEST_P(DevicePackTest, UnpacksWhatTheHostReaderUnpacks) {
  DeviceModel src(1), dst(2);
  const proto::WeightManifest m = MakeManifest(src.specs, GetParam(), 64);
  std::vector<uint64_t> sums;
  std::vector<char> host = HostStream(m, src, &sums);
  const torch::Tensor stream =
      torch::from_blob(host.data(), {static_cast<int64_t>(host.size())}, torch::kUInt8);
  WholeStreamSource source(m, stream);
  auto dest = MatchDeviceDestinations(m, dst.Named(), "engine rollout-0");
  ASSERT_TRUE(dest.ok()) << dest.status();
  auto stats = ReadDeviceVersion(m, 1, source, *dest, "engine rollout-0");
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->bytes, m.total_bytes());
  EXPECT_EQ(stats->buckets, BucketCount(m));
  // The host reader on the same stream: the reference.
  std::vector<std::vector<float>> want;
  std::vector<Destination> targets;
  for (size_t i = 0; i < src.specs.size(); ++i) {
    want.emplace_back(static_cast<size_t>(src.values[i].numel()));
    targets.push_back({src.specs[i].name, src.specs[i].shape, want.back().data()});
  }
  MemorySource host_source(m, host.data(), sums);
  ASSERT_TRUE(ReadVersion(m, 1, host_source, *MatchDestinations(m, targets, "e"), "e").ok());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(std::memcmp(dst.values[i].data_ptr<float>(), want[i].data(), want[i].size() * 4), 0)
        << src.specs[i].name;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, DevicePackTest, ::testing::Values("float32", "bfloat16"));

TEST(DeviceStreamTest, AnotherModelIsRefusedNamingTheTensor) {
  DeviceModel src(1);
  const proto::WeightManifest m = MakeManifest(src.specs, "float32", 64);
  auto named = src.Named();
  named[1].second = torch::zeros({8, 7});
  auto dest = MatchDeviceDestinations(m, named, "engine rollout-1");
  ASSERT_FALSE(dest.ok());
  EXPECT_EQ(
      dest.status().message(),
      "engine rollout-1: tensor 'layer.0.w' is [8, 8] in the stream but [8, 7] in this model");
}

TEST(DeviceStreamTest, ABucketOfTheWrongSizeIsRefused) {
  DeviceModel src(1), dst(2);
  const proto::WeightManifest m = MakeManifest(src.specs, "float32", 128);
  proto::WeightManifest shorter = m;
  shorter.set_total_bytes(m.total_bytes() - 64);  // the source cuts the last bucket short
  const torch::Tensor stream = torch::zeros({static_cast<int64_t>(m.total_bytes())}, torch::kUInt8);
  WholeStreamSource source(shorter, stream);
  auto dest = MatchDeviceDestinations(m, dst.Named(), "e");
  auto got = ReadDeviceVersion(m, 4, source, *dest, "e");
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("e refused weight version 4: bucket " +
                                        std::to_string(BucketCount(m) - 1) + " of " +
                                        std::to_string(BucketCount(m)) + " holds"),
            std::string::npos)
      << got.status();
}

// The nccl transport's pair over a gloo group of 3 (the trainer and two engines as threads):
// every engine ends with the trainer's values, two versions in a row.
class DeviceBroadcastTest : public ::testing::TestWithParam<const char*> {};

TEST_P(DeviceBroadcastTest, EveryEngineEndsWithThePublishersParameters) {
  const std::string dtype = GetParam();
  DeviceModel src(1);
  const proto::WeightManifest m = MakeManifest(src.specs, dtype, 128);
  std::vector<DeviceModel> engines = {DeviceModel(5), DeviceModel(6)};
  std::vector<absl::Status> results(3);
  absl::Status run = dist::RunLocalGroup(3, [&](dist::Communicator& comm) {
    const int r = comm.rank();
    for (int64_t version = 1; version <= 2 && results[r].ok(); ++version) {
      if (r == 0) {
        DeviceBroadcastSink sink(&comm, m.bucket_bytes(), torch::kCPU);
        results[0] = WriteDevice(m, src, sink, version);
      } else {
        DeviceBroadcastSource source(&comm, m.bucket_bytes(), torch::kCPU);
        auto dest = MatchDeviceDestinations(m, engines[r - 1].Named(), "e");
        results[r] =
            dest.ok() ? ReadDeviceVersion(m, version, source, *dest, "e").status() : dest.status();
      }
    }
  });
  ASSERT_TRUE(run.ok()) << run;
  for (const auto& s : results) EXPECT_TRUE(s.ok()) << s;
  for (const DeviceModel& e : engines) {
    for (size_t t = 0; t < src.values.size(); ++t) {
      const torch::Tensor want = dtype == "bfloat16"
                                     ? src.values[t].to(torch::kBFloat16).to(torch::kFloat32)
                                     : src.values[t];
      EXPECT_TRUE(torch::equal(e.values[t], want)) << src.specs[t].name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, DeviceBroadcastTest, ::testing::Values("float32", "bfloat16"));

TEST(DeviceBroadcastTest, AnEngineOutOfStepWithThePublisherIsRefusedNamingBoth) {
  DeviceModel src(1), dst(2);
  const proto::WeightManifest m = MakeManifest(src.specs, "float32", 128);
  absl::Status engine;
  absl::Status run = dist::RunLocalGroup(2, [&](dist::Communicator& comm) {
    if (comm.rank() == 0) {
      DeviceBroadcastSink sink(&comm, m.bucket_bytes(), torch::kCPU);
      WriteDevice(m, src, sink, 7).IgnoreError();
    } else {
      DeviceBroadcastSource source(&comm, m.bucket_bytes(), torch::kCPU);
      auto dest = MatchDeviceDestinations(m, dst.Named(), "rollout-0");
      // Told of version 6 while the publisher streams 7: refused at the first bucket, the
      // remaining broadcasts still received so the group stays in step.
      engine = ReadDeviceVersion(m, 6, source, *dest, "rollout-0").status();
      for (int64_t b = 1; b < BucketCount(m); ++b) source.Next(7, b).IgnoreError();
    }
  });
  ASSERT_TRUE(run.ok()) << run;
  EXPECT_EQ(engine.code(), absl::StatusCode::kDataLoss) << engine;
  EXPECT_EQ(engine.message(),
            "rollout-0 could not load weight version 6: bucket 0 of " +
                std::to_string(BucketCount(m)) +
                ": the publisher broadcast bucket 0 of version 7 where bucket 0 of version 6 was "
                "expected");
}

}  // namespace
}  // namespace rlforge
