#include "proto/wire.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace rlforge {

std::vector<zmq::message_t> Encode(Message msg) {
  msg.envelope.set_protocol_version(kProtocolVersion);
  msg.envelope.clear_tensors();
  for (const auto& t : msg.tensors) *msg.envelope.add_tensors() = t.Meta();
  std::vector<zmq::message_t> frames;
  frames.reserve(1 + msg.tensors.size());
  std::string header = msg.envelope.SerializeAsString();
  frames.emplace_back(header.data(), header.size());
  for (auto& t : msg.tensors) frames.push_back(t.TakeMessage());
  return frames;
}

absl::StatusOr<Message> Decode(std::vector<zmq::message_t> frames, const WireLimits& limits) {
  if (frames.empty()) return absl::InvalidArgumentError("empty message (no frames)");
  size_t total = 0;
  for (const auto& f : frames) total += f.size();
  if (total > limits.max_message_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "message of ", total, " bytes exceeds the limit of ", limits.max_message_bytes, " bytes"));
  }
  if (frames.size() - 1 > limits.max_tensors) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "message has ", frames.size() - 1, " tensor frames; the limit is ", limits.max_tensors));
  }
  const zmq::message_t& head = frames[0];
  if (head.size() > limits.max_envelope_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("envelope of ", head.size(),
                                                     " bytes exceeds the limit of ",
                                                     limits.max_envelope_bytes, " bytes"));
  }
  Message msg;
  if (!msg.envelope.ParseFromArray(head.data(), static_cast<int>(head.size()))) {
    return absl::InvalidArgumentError(
        absl::StrCat("envelope frame of ", head.size(), " bytes is not a valid Envelope"));
  }
  const proto::Envelope& env = msg.envelope;
  if (env.protocol_version() != kProtocolVersion) {
    return absl::FailedPreconditionError(absl::StrCat("protocol version ", env.protocol_version(),
                                                      ", this build speaks version ",
                                                      kProtocolVersion));
  }
  if (env.body_case() == proto::Envelope::BODY_NOT_SET) {
    return absl::InvalidArgumentError("envelope has no body (unknown message type?)");
  }
  if (static_cast<size_t>(env.tensors_size()) != frames.size() - 1) {
    return absl::InvalidArgumentError(absl::StrCat("envelope announces ", env.tensors_size(),
                                                   " tensors but ", frames.size() - 1,
                                                   " tensor frames arrived"));
  }
  ASSIGN_OR_RETURN(msg.tensors, DecodeTensorFrames(MetaViews(env.tensors()), frames, 1, limits));
  return msg;
}

absl::StatusOr<std::vector<TensorFrame>> DecodeTensorFrames(
    const std::vector<TensorMetaView>& metas, std::vector<zmq::message_t>& frames, size_t first,
    const WireLimits& limits) {
  if (metas.size() + first != frames.size()) {
    return absl::InvalidArgumentError(absl::StrCat("header announces ", metas.size(),
                                                   " tensors but ", frames.size() - first,
                                                   " tensor frames arrived"));
  }
  std::vector<TensorFrame> out;
  out.reserve(metas.size());
  for (size_t i = 0; i < metas.size(); ++i) {
    const TensorMetaView& meta = metas[i];
    auto dtype = static_cast<DType>(meta.dtype);
    size_t elem = DTypeSize(dtype);
    if (elem == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", i, " '", meta.name, "': unknown dtype ", meta.dtype));
    }
    // Multiply with an overflow guard: a hostile shape must not wrap around.
    size_t bytes = elem;
    for (int64_t d : meta.shape) {
      if (d < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor ", i, " '", meta.name, "': negative dimension ", d));
      }
      if (d > 0 && bytes > limits.max_message_bytes / static_cast<size_t>(d)) {
        return absl::ResourceExhaustedError(
            absl::StrCat("tensor ", i, " '", meta.name, "': shape exceeds the size limit"));
      }
      bytes *= static_cast<size_t>(d);
    }
    size_t got = frames[first + i].size();
    if (bytes != meta.nbytes || got != bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", i, " '", meta.name, "': shape and dtype need ", bytes,
                       " bytes, header says ", meta.nbytes, ", frame has ", got, " (truncated?)"));
    }
    out.push_back(
        TensorFrame::FromMessage(meta.name, dtype, meta.shape, std::move(frames[first + i])));
  }
  return out;
}

std::string BodyName(const proto::Envelope& envelope) {
  const auto* field = proto::Envelope::descriptor()->FindFieldByNumber(envelope.body_case());
  return field ? field->name() : "none";
}

}  // namespace rlforge
