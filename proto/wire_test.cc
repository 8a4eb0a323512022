#include "proto/wire.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

namespace rlforge {
namespace {

Message SampleMessage() {
  Message m;
  m.envelope.set_job_id("job");
  m.envelope.set_sender("rollout-0");
  m.envelope.mutable_work_result()->set_work_id(7);
  std::vector<float> a(100);
  std::iota(a.begin(), a.end(), 0.5f);
  m.tensors.push_back(TensorFrame::FromVector("obs", a));
  m.tensors.push_back(TensorFrame::FromVector<int64_t>("actions", {3, 1, 4, 1, 5}));
  return m;
}

TEST(WireTest, RoundTripKeepsHeaderAndBytes) {
  auto decoded = Decode(Encode(SampleMessage()), WireLimits{});
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->envelope.sender(), "rollout-0");
  EXPECT_EQ(decoded->envelope.work_result().work_id(), 7u);
  ASSERT_EQ(decoded->tensors.size(), 2u);
  EXPECT_EQ(decoded->tensors[0].name(), "obs");
  EXPECT_EQ(decoded->tensors[0].shape(), std::vector<int64_t>{100});
  EXPECT_FLOAT_EQ(decoded->tensors[0].data_as<float>()[99], 99.5f);
  EXPECT_EQ(decoded->tensors[1].ToVector<int64_t>(), (std::vector<int64_t>{3, 1, 4, 1, 5}));
}

TEST(WireTest, BorrowedMemoryIsReleasedAfterSend) {
  std::vector<int32_t> data(16, 42);
  bool released = false;
  {
    Message m = SampleMessage();
    m.tensors.push_back(
        TensorFrame::Borrow("b", proto::I32, {16}, data.data(), [&] { released = true; }));
    auto decoded = Decode(Encode(std::move(m)), WireLimits{});
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(decoded->tensors[2].data_as<int32_t>()[15], 42);
    EXPECT_EQ(decoded->tensors[2].data(), data.data()) << "borrowed bytes must not be copied";
  }
  EXPECT_TRUE(released);
}

TEST(WireTest, RejectsEmptyAndGarbage) {
  EXPECT_EQ(Decode({}, WireLimits{}).status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<zmq::message_t> frames;
  frames.emplace_back(std::string("\xff\xff\xff garbage"));
  EXPECT_EQ(Decode(std::move(frames), WireLimits{}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(WireTest, RejectsWrongProtocolVersion) {
  auto frames = Encode(SampleMessage());
  proto::Envelope env;
  ASSERT_TRUE(env.ParseFromArray(frames[0].data(), static_cast<int>(frames[0].size())));
  env.set_protocol_version(kProtocolVersion + 1);
  frames[0] = zmq::message_t(env.SerializeAsString());
  auto r = Decode(std::move(frames), WireLimits{});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("protocol version 2"), std::string::npos);
}

TEST(WireTest, RejectsTruncatedTensorFrame) {
  auto frames = Encode(SampleMessage());
  frames[1] = zmq::message_t(frames[1].data(), frames[1].size() - 3);
  auto r = Decode(std::move(frames), WireLimits{});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("'obs'"), std::string::npos) << r.status();
}

TEST(WireTest, RejectsMissingTensorFrame) {
  auto frames = Encode(SampleMessage());
  frames.pop_back();
  EXPECT_EQ(Decode(std::move(frames), WireLimits{}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(WireTest, RejectsOversizedMessage) {
  WireLimits small;
  small.max_message_bytes = 256;
  EXPECT_EQ(Decode(Encode(SampleMessage()), small).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(WireTest, RejectsHostileShapeWithoutOverflow) {
  auto frames = Encode(SampleMessage());
  proto::Envelope env;
  ASSERT_TRUE(env.ParseFromArray(frames[0].data(), static_cast<int>(frames[0].size())));
  env.mutable_tensors(0)->clear_shape();
  env.mutable_tensors(0)->add_shape(int64_t{1} << 62);
  env.mutable_tensors(0)->add_shape(int64_t{1} << 62);
  frames[0] = zmq::message_t(env.SerializeAsString());
  EXPECT_FALSE(Decode(std::move(frames), WireLimits{}).ok());
}

TEST(WireTest, RejectsEnvelopeWithoutBody) {
  proto::Envelope env;
  env.set_protocol_version(kProtocolVersion);
  std::vector<zmq::message_t> frames;
  frames.emplace_back(env.SerializeAsString());
  EXPECT_EQ(Decode(std::move(frames), WireLimits{}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(WireTest, Fnv1aMatchesKnownVector) {
  // Published FNV-1a 64 test vector for "a".
  EXPECT_EQ(Fnv1a64("a", 1), 0xaf63dc4c8601ec8cull);
}

}  // namespace
}  // namespace rlforge
