// Wire format of the control and data planes.
//
// Message -> Encode -> [envelope frame][tensor frame]... -> ZeroMQ -> Decode -> Message
//
// Decode never trusts its input: every malformed, truncated, unknown-version or
// oversized message becomes an error status naming what was wrong, so callers
// can log and drop it without crashing or blocking.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/control.pb.h"
#include "proto/tensor_frame.h"
#include "zmq.hpp"

namespace rlforge {

inline constexpr uint32_t kProtocolVersion = 1;

struct Message {
  proto::Envelope envelope;
  std::vector<TensorFrame> tensors;
};

struct WireLimits {
  // Envelope plus every tensor frame, in bytes.
  size_t max_message_bytes = size_t{1} << 30;
  size_t max_tensors = 4096;
  size_t max_envelope_bytes = size_t{64} << 20;
};

// Sets envelope.protocol_version and envelope.tensors from msg.tensors, then
// returns the frames to send. Takes the tensors' bytes without copying.
std::vector<zmq::message_t> Encode(Message msg);

// Parses and checks frames produced by Encode. Error codes: kFailedPrecondition
// for a protocol-version mismatch, kResourceExhausted for an oversized message,
// kInvalidArgument for anything malformed.
absl::StatusOr<Message> Decode(std::vector<zmq::message_t> frames, const WireLimits& limits);

// Name of the envelope's body ("register", "work_request", ...), for logs.
std::string BodyName(const proto::Envelope& envelope);

}  // namespace rlforge
