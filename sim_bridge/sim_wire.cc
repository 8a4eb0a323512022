#include "sim_bridge/sim_wire.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace rlforge::sim {

namespace {

template <typename Header>
std::vector<zmq::message_t> EncodeFrames(Header& header, std::vector<TensorFrame>& tensors) {
  header.set_protocol_version(kSimProtocolVersion);
  header.clear_tensors();
  for (const auto& t : tensors) {
    pb::TensorMeta* m = header.add_tensors();
    m->set_name(t.name());
    m->set_dtype(static_cast<pb::DType>(t.dtype()));
    for (int64_t d : t.shape()) m->add_shape(d);
    m->set_nbytes(t.nbytes());
  }
  std::vector<zmq::message_t> frames;
  std::string bytes = header.SerializeAsString();
  frames.emplace_back(bytes.data(), bytes.size());
  for (auto& t : tensors) frames.push_back(t.TakeMessage());
  return frames;
}

template <typename Header>
absl::Status DecodeHeader(std::vector<zmq::message_t>& frames, const WireLimits& limits,
                          const char* what, Header* header, std::vector<TensorFrame>* tensors) {
  if (frames.empty()) return absl::InvalidArgumentError(absl::StrCat("empty ", what));
  size_t total = 0;
  for (const auto& f : frames) total += f.size();
  if (total > limits.max_message_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        what, " of ", total, " bytes exceeds the limit of ", limits.max_message_bytes));
  }
  if (!header->ParseFromArray(frames[0].data(), static_cast<int>(frames[0].size()))) {
    return absl::InvalidArgumentError(absl::StrCat("first frame is not a valid ", what));
  }
  if (header->protocol_version() != kSimProtocolVersion) {
    return absl::FailedPreconditionError(absl::StrCat("sim_bridge protocol version ",
                                                      header->protocol_version(),
                                                      ", this side speaks ", kSimProtocolVersion));
  }
  if (header->body_case() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has no body (unknown message type?)"));
  }
  ASSIGN_OR_RETURN(*tensors, DecodeTensorFrames(MetaViews(header->tensors()), frames, 1, limits));
  return absl::OkStatus();
}

}  // namespace

std::vector<zmq::message_t> EncodeRequest(SimRequestMessage msg) {
  return EncodeFrames(msg.header, msg.tensors);
}

std::vector<zmq::message_t> EncodeReply(SimReplyMessage msg) {
  return EncodeFrames(msg.header, msg.tensors);
}

absl::StatusOr<SimRequestMessage> DecodeRequest(std::vector<zmq::message_t> frames,
                                                const WireLimits& limits) {
  SimRequestMessage m;
  RETURN_IF_ERROR(DecodeHeader(frames, limits, "SimRequest", &m.header, &m.tensors));
  return m;
}

absl::StatusOr<SimReplyMessage> DecodeReply(std::vector<zmq::message_t> frames,
                                            const WireLimits& limits) {
  SimReplyMessage m;
  RETURN_IF_ERROR(DecodeHeader(frames, limits, "SimReply", &m.header, &m.tensors));
  return m;
}

Space SpaceFromProto(const pb::Space& p) {
  Space s;
  if (p.kind() == pb::Space::DISCRETE) {
    s = Space::Discrete(p.n());
  } else {
    s = Space::Box({p.shape().begin(), p.shape().end()}, {p.low().begin(), p.low().end()},
                   {p.high().begin(), p.high().end()});
    s.dtype = static_cast<DType>(p.dtype());
  }
  return s;
}

void SpaceToProto(const Space& s, pb::Space* p) {
  p->set_kind(s.is_discrete() ? pb::Space::DISCRETE : pb::Space::BOX);
  p->set_dtype(static_cast<pb::DType>(s.dtype));
  for (int64_t d : s.shape) p->add_shape(d);
  for (double v : s.low) p->add_low(v);
  for (double v : s.high) p->add_high(v);
  p->set_n(s.n);
}

EnvSpec SpecFromProto(const pb::EnvSpec& p) {
  EnvSpec s;
  s.id = p.env_id();
  s.observation = SpaceFromProto(p.observation_space());
  s.action = SpaceFromProto(p.action_space());
  s.max_episode_steps = p.max_episode_steps();
  return s;
}

void SpecToProto(const EnvSpec& s, int num_envs, pb::EnvSpec* p) {
  p->set_env_id(s.id);
  SpaceToProto(s.observation, p->mutable_observation_space());
  SpaceToProto(s.action, p->mutable_action_space());
  p->set_num_envs(num_envs);
  p->set_max_episode_steps(s.max_episode_steps);
}

}  // namespace rlforge::sim
