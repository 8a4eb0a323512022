#include "sim_bridge/remote_vector_env.h"

#include <chrono>
#include <cstring>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "zmq_addon.hpp"

namespace rlforge::sim {

namespace {

bool SameSpace(const Space& a, const Space& b) {
  return a.kind == b.kind && a.shape == b.shape && a.n == b.n;
}

const TensorFrame* FindTensor(const SimReplyMessage& r, const std::string& name) {
  for (const auto& t : r.tensors) {
    if (t.name() == name) return &t;
  }
  return nullptr;
}

}  // namespace

RemoteVectorEnv::RemoteVectorEnv(std::vector<Server> servers, Options options)
    : servers_(std::move(servers)), options_(options) {}

std::string RemoteVectorEnv::Where(const Server& s) const {
  return absl::StrCat("sim server ", s.address.name, " (", s.address.endpoint, ")");
}

std::string RemoteVectorEnv::location() const {
  std::vector<std::string> eps;
  for (const auto& s : servers_) eps.push_back(s.address.endpoint);
  return absl::StrJoin(eps, ", ");
}

absl::StatusOr<std::unique_ptr<RemoteVectorEnv>> RemoteVectorEnv::Connect(
    zmq::context_t& ctx, std::vector<SimServerAddress> addresses, Options options) {
  if (addresses.empty()) return absl::InvalidArgumentError("no sim servers to connect to");
  std::vector<Server> servers;
  for (auto& a : addresses) {
    Server s{a, zmq::socket_t(), nullptr};
    if (IsShmAddress(a.endpoint)) {
      auto ch = ShmChannel::Open(a.endpoint, options.connect_timeout_ms, {});
      if (!ch.ok()) return Annotate(ch.status(), absl::StrCat("sim server ", a.name));
      s.shm = std::move(ch).value();
    } else {
      s.socket = zmq::socket_t(ctx, zmq::socket_type::dealer);
      s.socket.set(zmq::sockopt::linger, 0);
      try {
        s.socket.connect(a.endpoint);
      } catch (const zmq::error_t& e) {
        return absl::InvalidArgumentError(absl::StrCat(
            "sim server ", a.name, ": cannot connect to ", a.endpoint, ": ", e.what()));
      }
    }
    servers.push_back(std::move(s));
  }
  std::unique_ptr<RemoteVectorEnv> env(new RemoteVectorEnv(std::move(servers), options));
  for (auto& s : env->servers_) {
    SimRequestMessage m;
    m.header.mutable_spec();
    RETURN_IF_ERROR(env->Send(s, std::move(m)));
  }
  std::vector<SimReplyMessage> replies;
  RETURN_IF_ERROR(env->ReceiveAll(&replies, options.connect_timeout_ms));
  for (size_t i = 0; i < env->servers_.size(); ++i) {
    Server& s = env->servers_[i];
    RETURN_IF_ERROR(env->CheckReply(s, replies[i], "spec"));
    EnvSpec spec = SpecFromProto(replies[i].header.spec());
    s.num_envs = replies[i].header.spec().num_envs();
    if (s.num_envs < 1) {
      return absl::FailedPreconditionError(absl::StrCat(env->Where(s), " reports no envs"));
    }
    if (spec.observation.is_discrete() || spec.observation.flat_size() < 1) {
      return absl::FailedPreconditionError(
          absl::StrCat(env->Where(s), ": observations must be a non-empty Box, got ",
                       spec.observation.ToString()));
    }
    if (!options.env_id.empty() && spec.id != options.env_id) {
      return absl::FailedPreconditionError(absl::StrCat(
          env->Where(s), " serves env '", spec.id, "', but the job's env.id is '", options.env_id,
          "': set env.id: ", spec.id,
          " to train on what it serves, or point the job at a server of ", options.env_id));
    }
    if (i == 0) {
      env->spec_ = spec;
    } else if (spec.id != env->spec_.id || !SameSpace(spec.observation, env->spec_.observation) ||
               !SameSpace(spec.action, env->spec_.action)) {
      return absl::FailedPreconditionError(
          absl::StrCat(env->Where(s), " serves ", spec.id, " ", spec.observation.ToString(), " -> ",
                       spec.action.ToString(), ", unlike the first server's ", env->spec_.id));
    }
    s.offset = env->total_envs_;
    env->total_envs_ += s.num_envs;
  }
  env->ended_.assign(env->total_envs_, 0);
  env->stepping_.assign(env->servers_.size(), 0);
  return env;
}

absl::Status RemoteVectorEnv::Send(Server& s, SimRequestMessage msg) {
  msg.header.set_seq(++s.seq);
  auto frames = EncodeRequest(std::move(msg));
  if (s.shm) {
    absl::Status st = s.shm->Send(frames);
    if (!st.ok()) return Annotate(st, absl::StrCat("cannot send to ", Where(s)));
    return absl::OkStatus();
  }
  try {
    zmq::send_multipart(s.socket, frames);
  } catch (const zmq::error_t& e) {
    return absl::UnavailableError(absl::StrCat("cannot send to ", Where(s), ": ", e.what()));
  }
  return absl::OkStatus();
}

absl::Status RemoteVectorEnv::ReceiveAll(std::vector<SimReplyMessage>* replies, int timeout_ms) {
  // Every request is out already, so taking the answers in order costs no time.
  replies->clear();
  replies->resize(servers_.size());
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (size_t i = 0; i < servers_.size(); ++i) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    RETURN_IF_ERROR(ReceiveOne(servers_[i], &(*replies)[i],
                               static_cast<int>(std::max<int64_t>(left.count(), 1))));
  }
  return absl::OkStatus();
}

absl::Status RemoteVectorEnv::CheckReply(const Server& s, const SimReplyMessage& r,
                                         const char* expected) const {
  if (r.header.has_error()) {
    const pb::SimError& e = r.header.error();
    std::string env = e.env_index() >= 0 ? absl::StrCat(" env ", s.offset + e.env_index(),
                                                        " (its env ", e.env_index(), ")")
                                         : "";
    return absl::AbortedError(
        absl::StrCat(Where(s), env, ": ", e.message(), e.retryable() ? " (retryable)" : ""));
  }
  const auto* field = pb::SimReply::descriptor()->FindFieldByNumber(r.header.body_case());
  if (field == nullptr || field->name() != expected) {
    return absl::DataLossError(absl::StrCat(Where(s), " answered '",
                                            field ? field->name() : "nothing", "' to a ", expected,
                                            " request"));
  }
  return absl::OkStatus();
}

namespace {

// Copies an observation tensor (f32 or f64) into out[offset...].
// `where` names the server; it is called only for an error (this runs every step).
absl::Status TakeObs(const TensorFrame* t, int64_t count, float* out,
                     absl::FunctionRef<std::string()> where) {
  if (t == nullptr)
    return absl::DataLossError(absl::StrCat(where(), ": reply has no 'obs' tensor"));
  if (t->numel() != count) {
    return absl::DataLossError(
        absl::StrCat(where(), ": 'obs' has ", t->numel(), " values, expected ", count));
  }
  if (t->dtype() == proto::F32) {
    std::memcpy(out, t->data(), static_cast<size_t>(count) * sizeof(float));
  } else if (t->dtype() == proto::F64) {
    const double* d = t->data_as<double>();
    for (int64_t i = 0; i < count; ++i) out[i] = static_cast<float>(d[i]);
  } else {
    return absl::DataLossError(
        absl::StrCat(where(), ": 'obs' must be f32 or f64, got ", DTypeName(t->dtype())));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RemoteVectorEnv::Reset(absl::Span<const int64_t> seeds, std::vector<float>* obs) {
  if (!seeds.empty() && static_cast<int>(seeds.size()) != total_envs_) {
    return absl::InvalidArgumentError(
        absl::StrCat("reset got ", seeds.size(), " seeds for ", total_envs_, " envs"));
  }
  for (auto& s : servers_) {
    SimRequestMessage m;
    auto* r = m.header.mutable_reset();
    if (!seeds.empty()) {
      for (int i = 0; i < s.num_envs; ++i) r->add_seeds(seeds[s.offset + i]);
    }
    RETURN_IF_ERROR(Send(s, std::move(m)));
  }
  std::vector<SimReplyMessage> replies;
  RETURN_IF_ERROR(ReceiveAll(&replies, options_.timeout_ms));
  int64_t obs_size = spec_.observation.flat_size();
  obs->resize(static_cast<size_t>(total_envs_ * obs_size));
  for (size_t i = 0; i < servers_.size(); ++i) {
    const Server& s = servers_[i];
    RETURN_IF_ERROR(CheckReply(s, replies[i], "reset"));
    RETURN_IF_ERROR(TakeObs(FindTensor(replies[i], "obs"), s.num_envs * obs_size,
                            obs->data() + s.offset * obs_size, [&] { return Where(s); }));
  }
  ended_.assign(total_envs_, 0);
  stepping_.assign(servers_.size(), 0);  // answers to steps begun before this are stale now
  return absl::OkStatus();
}

absl::Status RemoteVectorEnv::SendStep(Server& s, const void* actions) {
  SimRequestMessage m;
  m.header.mutable_step();
  if (spec_.action.is_discrete()) {
    m.tensors.push_back(TensorFrame::Copy("actions", proto::I64, {s.num_envs},
                                          static_cast<const int64_t*>(actions)));
  } else {
    std::vector<int64_t> shape = {s.num_envs};
    for (int64_t d : spec_.action.shape) shape.push_back(d);
    m.tensors.push_back(
        TensorFrame::Copy("actions", proto::F32, shape, static_cast<const float*>(actions)));
  }
  return Send(s, std::move(m));
}

absl::Status RemoteVectorEnv::ReceiveOne(Server& s, SimReplyMessage* reply, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return absl::DeadlineExceededError(
          absl::StrCat(Where(s), " did not answer within ", timeout_ms / 1000.0,
                       " s (sim.step_timeout_s); is it hung or overloaded?"));
    }
    std::vector<zmq::message_t> frames;
    if (s.shm) {
      auto got = s.shm->Receive(static_cast<int>(left.count()));
      if (absl::IsDeadlineExceeded(got.status())) continue;
      if (!got.ok()) return Annotate(got.status(), Where(s));
      frames = std::move(got).value();
    } else {
      zmq::pollitem_t item = {s.socket.handle(), 0, ZMQ_POLLIN, 0};
      try {
        zmq::poll(&item, 1,
                  std::min<std::chrono::milliseconds>(left, std::chrono::milliseconds(100)));
      } catch (const zmq::error_t&) {
        continue;  // EINTR
      }
      if (!(item.revents & ZMQ_POLLIN)) continue;
      (void)zmq::recv_multipart(s.socket, std::back_inserter(frames));
    }
    auto decoded = DecodeReply(std::move(frames), limits_);
    if (!decoded.ok()) {
      return absl::DataLossError(
          absl::StrCat(Where(s), " sent a bad reply: ", Msg(decoded.status())));
    }
    if (decoded->header.seq() != s.seq) continue;  // a stale answer: ignore
    *reply = std::move(decoded).value();
    return absl::OkStatus();
  }
}

absl::Status RemoteVectorEnv::TakeStep(const Server& s, const SimReplyMessage& r, StepOutput* out,
                                       int out_offset) {
  RETURN_IF_ERROR(CheckReply(s, r, "step"));
  int64_t obs_size = spec_.observation.flat_size();
  auto where = [&] { return Where(s); };
  RETURN_IF_ERROR(TakeObs(FindTensor(r, "obs"), s.num_envs * obs_size,
                          out->obs.data() + out_offset * obs_size, where));
  const TensorFrame* rew = FindTensor(r, "reward");
  const TensorFrame* term = FindTensor(r, "terminated");
  const TensorFrame* trunc = FindTensor(r, "truncated");
  if (rew == nullptr || term == nullptr || trunc == nullptr || rew->numel() != s.num_envs ||
      term->numel() != s.num_envs || trunc->numel() != s.num_envs ||
      (rew->dtype() != proto::F64 && rew->dtype() != proto::F32) || DTypeSize(term->dtype()) != 1 ||
      DTypeSize(trunc->dtype()) != 1) {
    return absl::DataLossError(absl::StrCat(
        where(), ": a step reply needs reward (f64 or f32), terminated and truncated (u8) with ",
        s.num_envs, " values each"));
  }
  for (int j = 0; j < s.num_envs; ++j) {
    int g = s.offset + j;  // global env index
    int o = out_offset + j;
    double reward = rew->dtype() == proto::F64 ? rew->data_as<double>()[j]
                                               : static_cast<const float*>(rew->data())[j];
    out->reward[o] = reward;
    out->terminated[o] = static_cast<const uint8_t*>(term->data())[j] != 0;
    out->truncated[o] = static_cast<const uint8_t*>(trunc->data())[j] != 0;
    out->reset[o] = ended_[g];
    ended_[g] = out->terminated[o] || out->truncated[o];
    const float* x = out->obs.data() + o * obs_size;
    for (int64_t k = 0; k < obs_size; ++k) {
      if (!std::isfinite(x[k])) {
        return absl::DataLossError(absl::StrCat(where(), " env ", g, " (its env ", j,
                                                ") returned observation[", k, "] = ", x[k]));
      }
    }
    if (!std::isfinite(reward)) {
      return absl::DataLossError(
          absl::StrCat(where(), " env ", g, " (its env ", j, ") returned reward ", reward));
    }
  }
  for (const pb::Episode& e : r.header.step().episodes()) {
    out->episodes.push_back({s.offset + e.env_index(), e.episode_return(), e.length()});
  }
  return absl::OkStatus();
}

absl::Status RemoteVectorEnv::BeginStep(int g, const void* actions) {
  if (g < 0 || g >= num_groups()) {
    return absl::InvalidArgumentError(absl::StrCat("no env group ", g, " here"));
  }
  if (stepping_[g]) {
    return absl::FailedPreconditionError(
        absl::StrCat(Where(servers_[g]), ": BeginStep while its last step is not ended"));
  }
  RETURN_IF_ERROR(SendStep(servers_[g], actions));
  stepping_[g] = 1;
  return absl::OkStatus();
}

absl::Status RemoteVectorEnv::EndStep(int g, StepOutput* out) {
  if (g < 0 || g >= num_groups()) {
    return absl::InvalidArgumentError(absl::StrCat("no env group ", g, " here"));
  }
  Server& s = servers_[g];
  if (!stepping_[g]) {
    return absl::FailedPreconditionError(absl::StrCat(Where(s), ": EndStep before BeginStep"));
  }
  stepping_[g] = 0;
  SimReplyMessage r;
  RETURN_IF_ERROR(ReceiveOne(s, &r, options_.timeout_ms));
  out->Resize(s.num_envs, spec_.observation.flat_size());
  return TakeStep(s, r, out, 0);
}

absl::Status RemoteVectorEnv::Step(const void* actions, StepOutput* out) {
  int64_t act_size = spec_.action.is_discrete() ? 1 : spec_.action.flat_size();
  for (size_t i = 0; i < servers_.size(); ++i) {
    if (stepping_[i]) {
      return absl::FailedPreconditionError(
          absl::StrCat(Where(servers_[i]), ": Step while a BeginStep is not ended"));
    }
  }
  // Every server gets its actions before any answer is awaited, so they step in parallel.
  for (auto& s : servers_) {
    const void* a =
        spec_.action.is_discrete()
            ? static_cast<const void*>(static_cast<const int64_t*>(actions) + s.offset)
            : static_cast<const void*>(static_cast<const float*>(actions) + s.offset * act_size);
    RETURN_IF_ERROR(SendStep(s, a));
  }
  out->Resize(total_envs_, spec_.observation.flat_size());
  for (auto& s : servers_) {
    SimReplyMessage r;
    RETURN_IF_ERROR(ReceiveOne(s, &r, options_.timeout_ms));
    RETURN_IF_ERROR(TakeStep(s, r, out, s.offset));
  }
  return absl::OkStatus();
}

}  // namespace rlforge::sim
