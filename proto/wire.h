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

// A tensor header as both protocols (control and sim_bridge) describe it.
struct TensorMetaView {
  std::string name;
  int dtype = 0;
  std::vector<int64_t> shape;
  uint64_t nbytes = 0;
};

template <typename MetaList>
std::vector<TensorMetaView> MetaViews(const MetaList& metas) {
  std::vector<TensorMetaView> out;
  for (const auto& m : metas) {
    out.push_back(
        {m.name(), static_cast<int>(m.dtype()), {m.shape().begin(), m.shape().end()}, m.nbytes()});
  }
  return out;
}

// Checks frames[first + i] against metas[i] (dtype known, shape x dtype size ==
// nbytes == frame size, no overflow) and adopts them as TensorFrames.
absl::StatusOr<std::vector<TensorFrame>> DecodeTensorFrames(
    const std::vector<TensorMetaView>& metas, std::vector<zmq::message_t>& frames, size_t first,
    const WireLimits& limits);

// Name of the envelope's body ("register", "work_request", ...), for logs.
std::string BodyName(const proto::Envelope& envelope);

}  // namespace rlforge
