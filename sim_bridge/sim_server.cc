#include "sim_bridge/sim_server.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "proto/zmq_transport.h"
#include "zmq_addon.hpp"

namespace rlforge::sim {

namespace {

SimReplyMessage ErrorReply(int env_index, const std::string& message, bool retryable) {
  SimReplyMessage r;
  pb::SimError* e = r.header.mutable_error();
  e->set_env_index(env_index);
  e->set_message(message);
  e->set_retryable(retryable);
  return r;
}

}  // namespace

SimServer::SimServer(zmq::socket_t socket, std::unique_ptr<ShmChannel> shm, std::string endpoint,
                     std::unique_ptr<LocalVectorEnv> envs)
    : socket_(std::move(socket)),
      shm_(std::move(shm)),
      endpoint_(std::move(endpoint)),
      envs_(std::move(envs)) {}

absl::StatusOr<std::unique_ptr<SimServer>> SimServer::Bind(zmq::context_t& ctx,
                                                           std::unique_ptr<LocalVectorEnv> envs,
                                                           const std::string& address,
                                                           ShmChannel::Options shm_options) {
  if (IsShmAddress(address)) {
    ASSIGN_OR_RETURN(auto shm, ShmChannel::Create(address, shm_options));
    return std::unique_ptr<SimServer>(
        new SimServer(zmq::socket_t(), std::move(shm), address, std::move(envs)));
  }
  zmq::socket_t s(ctx, zmq::socket_type::router);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::maxmsgsize, int64_t{1} << 30);
  try {
    s.bind(ZmqBindAddress(address));
  } catch (const zmq::error_t& e) {
    return absl::UnavailableError(absl::StrCat("cannot bind ", address, ": ", e.what()));
  }
  std::string ep = s.get(zmq::sockopt::last_endpoint);
  return std::unique_ptr<SimServer>(new SimServer(std::move(s), nullptr, ep, std::move(envs)));
}

std::vector<zmq::message_t> SimServer::Answer(std::vector<zmq::message_t> frames) {
  auto request = DecodeRequest(std::move(frames), limits_);
  uint64_t seq = request.ok() ? request->header.seq() : 0;
  SimReplyMessage reply = Handle(std::move(request));
  reply.header.set_seq(seq);
  ++served_;
  return EncodeReply(std::move(reply));
}

bool SimServer::ServeOne(int timeout_ms) {
  if (shm_) {
    auto frames = shm_->Receive(timeout_ms);
    if (!frames.ok()) {
      if (!absl::IsDeadlineExceeded(frames.status())) {
        spdlog::warn("sim server: {}", Msg(frames.status()));
      }
      return false;
    }
    absl::Status s = shm_->Send(Answer(std::move(frames).value()));
    if (!s.ok()) spdlog::warn("sim server: reply not sent: {}", Msg(s));
    return true;
  }
  std::vector<zmq::message_t> frames;
  try {
    socket_.set(zmq::sockopt::rcvtimeo, timeout_ms);
    if (!zmq::recv_multipart(socket_, std::back_inserter(frames))) return false;
  } catch (const zmq::error_t&) {
    return false;  // EINTR: let the caller check its stop flag
  }
  if (frames.size() < 2) return true;  // no routing id + header: nothing to answer
  zmq::message_t peer = std::move(frames[0]);
  frames.erase(frames.begin());
  std::vector<zmq::message_t> out;
  out.push_back(std::move(peer));
  for (auto& f : Answer(std::move(frames))) out.push_back(std::move(f));
  try {
    zmq::send_multipart(socket_, out);
  } catch (const zmq::error_t& e) {
    spdlog::warn("sim server: reply not sent: {}", e.what());
  }
  return true;
}

void SimServer::Serve(const std::atomic<int>* stop) {
  while (stop == nullptr || stop->load() == 0) ServeOne(100);
}

SimReplyMessage SimServer::Handle(absl::StatusOr<SimRequestMessage> request) {
  if (!request.ok()) {
    spdlog::warn("sim server: bad request: {}", Msg(request.status()));
    return ErrorReply(-1, Msg(request.status()), false);
  }
  SimRequestMessage& req = *request;
  switch (req.header.body_case()) {
    case pb::SimRequest::kSpec: {
      SimReplyMessage r;
      SpecToProto(envs_->spec(), envs_->num_envs(), r.header.mutable_spec());
      return r;
    }
    case pb::SimRequest::kReset: {
      std::vector<int64_t> seeds(req.header.reset().seeds().begin(),
                                 req.header.reset().seeds().end());
      std::vector<float> obs;
      absl::Status s = envs_->Reset(seeds, &obs);
      if (!s.ok()) return ErrorReply(envs_->last_error_env(), Msg(s), false);
      SimReplyMessage r;
      r.header.mutable_reset();
      std::vector<int64_t> shape = {envs_->num_envs()};
      for (int64_t d : envs_->spec().observation.shape) shape.push_back(d);
      r.tensors.push_back(TensorFrame::Copy("obs", proto::F32, shape, obs.data()));
      return r;
    }
    case pb::SimRequest::kStep:
      return HandleStep(req);
    case pb::SimRequest::kClose: {
      SimReplyMessage r;
      r.header.mutable_close();
      return r;
    }
    default:
      return ErrorReply(-1, "unknown request", false);
  }
}

SimReplyMessage SimServer::HandleStep(SimRequestMessage& req) {
  const EnvSpec& spec = envs_->spec();
  int n = envs_->num_envs();
  if (req.tensors.size() != 1 || req.tensors[0].name() != "actions") {
    return ErrorReply(-1, "step needs exactly one tensor named 'actions'", false);
  }
  const TensorFrame& a = req.tensors[0];
  DType want = spec.action.is_discrete() ? proto::I64 : proto::F32;
  int64_t want_numel = n * spec.action.flat_size();
  if (a.dtype() != want || a.numel() != want_numel) {
    return ErrorReply(-1,
                      absl::StrCat("actions must be ", DTypeName(want), " with ", want_numel,
                                   " elements (", n, " envs x ", spec.action.ToString(), "), got ",
                                   DTypeName(a.dtype()), " with ", a.numel()),
                      false);
  }
  absl::Status s = envs_->Step(a.data(), &out_);
  if (!s.ok()) return ErrorReply(envs_->last_error_env(), Msg(s), false);
  SimReplyMessage r;
  pb::StepReply* step = r.header.mutable_step();
  for (const EpisodeRecord& e : out_.episodes) {
    pb::Episode* ep = step->add_episodes();
    ep->set_env_index(e.env_index);
    ep->set_episode_return(e.episode_return);
    ep->set_length(e.length);
  }
  std::vector<int64_t> obs_shape = {n};
  for (int64_t d : spec.observation.shape) obs_shape.push_back(d);
  r.tensors.push_back(TensorFrame::Copy("obs", proto::F32, obs_shape, out_.obs.data()));
  r.tensors.push_back(TensorFrame::Copy("reward", proto::F64, {n}, out_.reward.data()));
  r.tensors.push_back(TensorFrame::Copy("terminated", proto::U8, {n}, out_.terminated.data()));
  r.tensors.push_back(TensorFrame::Copy("truncated", proto::U8, {n}, out_.truncated.data()));
  return r;
}

}  // namespace rlforge::sim
