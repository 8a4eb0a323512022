// Framing of sim_bridge messages: [SimRequest|SimReply header][tensor frames].
//
// Decoding checks the protocol version, the body, and every tensor frame
// against its header (proto/wire.h's DecodeTensorFrames); errors name what
// was wrong, for a SimError reply or the client's message.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "proto/sim_bridge.pb.h"
#include "proto/wire.h"
#include "sim_bridge/env.h"

namespace rlforge::sim {

inline constexpr uint32_t kSimProtocolVersion = 1;

namespace pb = ::rlforge::simbridge;

struct SimRequestMessage {
  pb::SimRequest header;
  std::vector<TensorFrame> tensors;
};
struct SimReplyMessage {
  pb::SimReply header;
  std::vector<TensorFrame> tensors;
};

std::vector<zmq::message_t> EncodeRequest(SimRequestMessage msg);
std::vector<zmq::message_t> EncodeReply(SimReplyMessage msg);
absl::StatusOr<SimRequestMessage> DecodeRequest(std::vector<zmq::message_t> frames,
                                                const WireLimits& limits);
absl::StatusOr<SimReplyMessage> DecodeReply(std::vector<zmq::message_t> frames,
                                            const WireLimits& limits);

// Conversions between the protocol's Space/EnvSpec and ours.
Space SpaceFromProto(const pb::Space& p);
void SpaceToProto(const Space& s, pb::Space* p);
EnvSpec SpecFromProto(const pb::EnvSpec& p);
void SpecToProto(const EnvSpec& s, int num_envs, pb::EnvSpec* p);

}  // namespace rlforge::sim
