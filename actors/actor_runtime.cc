#include "actors/actor_runtime.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "actors/heartbeat_sender.h"
#include "actors/role.h"
#include "common/clock.h"
#include "common/logging.h"
#include "common/status.h"
#include "config/job_config.h"
#include "proto/zmq_transport.h"

namespace rlforge {

namespace {

std::string RandomInstanceId() {
  std::random_device rd;
  return absl::StrFormat("%08x%08x", rd(), rd());
}

// Slurm's node name when the actor is a job step (the name placement and the dashboard use),
// else the host name.
std::string HostName() {
  const char* node = std::getenv("SLURMD_NODENAME");
  if (node != nullptr && *node != '\0') return node;
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

bool Stopped(const ActorOptions& o) { return o.stop != nullptr && o.stop->load() != 0; }

struct Registration {
  proto::Assignment assignment;
  std::string job_id;
};

// How long a stopped actor still waits for the answer to a Register it sent.
constexpr int64_t kStoppedRegisterGraceUs = 5'000'000;

// Sends Register until an Assignment or a Reject arrives. Resending is safe:
// the controller matches retries by instance id. A stop before any Register went out ends it;
// after one, the controller may already count this actor, so the answer is still awaited (a
// little while, no more Registers): an elastic actor then leaves properly instead of vanishing.
constexpr int kRegisterSendMs = 200;

absl::StatusOr<Registration> Register(ZmqClientTransport& t, const ActorOptions& o,
                                      const std::string& instance_id) {
  const Clock* clock = RealClock::Get();
  int64_t deadline = clock->NowMicros() + static_cast<int64_t>(o.register_timeout_s * 1e6);
  int64_t next_send = 0;
  bool sent = false, stopping = false;
  while (clock->NowMicros() < deadline) {
    if (Stopped(o) && !stopping) {
      if (!sent) return absl::CancelledError("stopped before registration");
      deadline = std::min(deadline, clock->NowMicros() + kStoppedRegisterGraceUs);
      stopping = true;
    }
    if (!stopping && clock->NowMicros() >= next_send) {
      Message m;
      m.envelope.set_sender(instance_id);
      proto::Register* r = m.envelope.mutable_register_();
      r->set_role(o.role);
      r->set_requested_rank(o.rank);
      r->set_host(HostName());
      r->set_pid(getpid());
      r->set_instance_id(instance_id);
      r->set_launch_token(o.launch_token);
      // A controller that refuses our handshake (no keys) keeps the message from leaving, and
      // so may one still starting: the handshake check below names the first; the second is
      // retried. Short sends, so that neither outlives the registration deadline.
      absl::Status s = t.SendWithin(std::move(m), kRegisterSendMs);
      RETURN_IF_ERROR(t.HandshakeError());
      if (!s.ok() && !absl::IsDeadlineExceeded(s)) return s;
      next_send = clock->NowMicros() + 1'000'000;
      sent |= s.ok();
    }
    auto got = t.Receive(100);
    RETURN_IF_ERROR(t.HandshakeError());
    if (!got) continue;
    if (!got->ok()) {
      spdlog::warn("dropped a malformed message from the controller: {}", got->status().ToString());
      continue;
    }
    const proto::Envelope& env = (*got)->envelope;
    if (env.has_assignment()) return Registration{env.assignment(), env.job_id()};
    if (env.has_reject()) {
      return absl::PermissionDeniedError(
          absl::StrCat("the controller refused this actor: ", env.reject().reason()));
    }
  }
  if (stopping) return absl::CancelledError("stopped while registering (no answer came)");
  return absl::DeadlineExceededError(absl::StrCat("no answer from a controller at ", o.connect,
                                                  " within ", o.register_timeout_s, " s"));
}

// How long a leaving actor waits for the controller to take its work back.
constexpr int64_t kLeaveAnswerUs = 10'000'000;

// SIGTERM on an elastic role: says so to the controller, which hands whatever this actor still
// holds to the others and does not count it as a fault, then exits 0. The results already
// sent stand (the work channel keeps its order); requests that crossed the Leave are handed
// back with the rest.
int Leave(ZmqClientTransport& t, const Registration& reg, const HeartbeatSender& heartbeat) {
  const std::string& actor_id = reg.assignment.actor_id();
  Message m;
  m.envelope.set_sender(actor_id);
  m.envelope.set_job_id(reg.job_id);
  m.envelope.mutable_leave()->set_reason("SIGTERM");
  if (absl::Status s = t.Send(std::move(m)); !s.ok()) {
    spdlog::error("{}: cannot tell the controller it leaves: {}", actor_id, s.ToString());
    return 1;
  }
  spdlog::info("{}: leaving on SIGTERM; the controller takes back its work", actor_id);
  const Clock* clock = RealClock::Get();
  const int64_t deadline = clock->NowMicros() + kLeaveAnswerUs;
  while (clock->NowMicros() < deadline && !heartbeat.controller_lost()) {
    auto got = t.Receive(100);
    if (got && got->ok() && (*got)->envelope.has_shutdown()) {
      spdlog::info("{}: left the job", actor_id);
      return 0;
    }
  }
  spdlog::warn("{}: no answer to leaving within {} s; exiting (the controller will count a loss)",
               actor_id, kLeaveAnswerUs / 1'000'000);
  return 0;
}

// How long an actor whose set-up failed on its config waits for the controller's Shutdown.
constexpr int64_t kSetupFailedAnswerUs = 10'000'000;

// The role cannot be set up from the job's config: says so to the controller (SetupFailed),
// which stops the job naming this actor and `error` instead of relaunching it, and waits for
// its Shutdown, so that the controller has read the report before it sees this process exit.
// Returns kConfigErrorExit either way: a launcher that reaps the exit first knows it too.
int ReportSetupFailure(ZmqClientTransport& t, const Registration& reg, const std::string& error) {
  const std::string& actor_id = reg.assignment.actor_id();
  Message m;
  m.envelope.set_sender(actor_id);
  m.envelope.set_job_id(reg.job_id);
  m.envelope.mutable_setup_failed()->set_error(error);
  if (absl::Status s = t.Send(std::move(m)); !s.ok()) {
    spdlog::error("{}: cannot report the failed set-up to the controller: {}", actor_id, Msg(s));
    return kConfigErrorExit;
  }
  const Clock* clock = RealClock::Get();
  const int64_t deadline = clock->NowMicros() + kSetupFailedAnswerUs;
  while (clock->NowMicros() < deadline) {
    auto got = t.Receive(100);
    if (got && got->ok() && (*got)->envelope.has_shutdown()) {
      spdlog::info("{}: the controller stops the job: {}", actor_id,
                   (*got)->envelope.shutdown().reason());
      return kConfigErrorExit;
    }
  }
  spdlog::warn("{}: no answer to the failed set-up within {} s; exiting", actor_id,
               kSetupFailedAnswerUs / 1'000'000);
  return kConfigErrorExit;
}

// Acts on one message from the controller: runs a work request and sends its result. Returns
// the exit code when the actor must stop (Shutdown, a result it cannot send).
std::optional<int> Dispatch(ZmqClientTransport& t, Role& role, const Registration& reg,
                            ActorStatus& status, Message msg) {
  const std::string& actor_id = reg.assignment.actor_id();
  const proto::Envelope& env = msg.envelope;
  if (env.has_shutdown()) {
    spdlog::info("{}: shutdown requested: {}", actor_id, env.shutdown().reason());
    return 0;
  }
  if (env.has_assignment()) return std::nullopt;  // answer to a Register retry
  if (!env.has_work_request()) {
    spdlog::warn("{}: ignored unexpected {} message", actor_id, BodyName(env));
    return std::nullopt;
  }
  const proto::WorkRequest& req = env.work_request();
  status.current_work_id = req.work_id();
  status.state = proto::Heartbeat::BUSY;
  auto reply = role.Handle(req, std::move(msg.tensors));
  Message out;
  out.envelope.set_sender(actor_id);
  out.envelope.set_job_id(reg.job_id);
  if (reply.ok()) {
    *out.envelope.mutable_work_result() = std::move(reply->result);
    out.tensors = std::move(reply->tensors);
    out.envelope.mutable_work_result()->set_ok(true);
  } else {
    spdlog::error("{}: work {} failed: {}", actor_id, req.work_id(), reply.status().ToString());
    out.envelope.mutable_work_result()->set_ok(false);
    out.envelope.mutable_work_result()->set_error(std::string(reply.status().message()));
  }
  proto::WorkResult* r = out.envelope.mutable_work_result();
  r->set_work_id(req.work_id());
  r->set_policy_version(role.policy_version());
  status.policy_version = role.policy_version();
  absl::Status sent = t.Send(std::move(out));
  status.works_done.fetch_add(1);
  status.current_work_id = 0;
  status.state = proto::Heartbeat::IDLE;
  if (!sent.ok()) {
    spdlog::error("{}: cannot send result of work {}: {}", actor_id, req.work_id(),
                  sent.ToString());
    return 1;
  }
  return std::nullopt;
}

// Serves work requests until Shutdown. Returns the exit code.
int Serve(ZmqClientTransport& t, Role& role, const Registration& reg, ActorStatus& status,
          const HeartbeatSender& heartbeat, const ActorOptions& o) {
  const std::string& actor_id = reg.assignment.actor_id();
  while (true) {
    if (Stopped(o)) {
      if (reg.assignment.may_leave() && o.stop->load() == SIGTERM) {
        // Requests already here are finished first: the controller may count on one (a reader
        // of a weight stream that has started) and must not get it back.
        for (auto got = t.Receive(0); got; got = t.Receive(0)) {
          if (!got->ok()) continue;
          if (auto code = Dispatch(t, role, reg, status, std::move(got->value()))) return *code;
        }
        return Leave(t, reg, heartbeat);
      }
      spdlog::info("{}: stopping on signal", actor_id);
      return 0;
    }
    if (heartbeat.controller_lost()) {
      spdlog::error("{}: lost the controller; exiting", actor_id);
      return 1;
    }
    auto got = t.Receive(100);
    if (!got) continue;
    if (!got->ok()) {
      spdlog::warn("{}: dropped a malformed message: {}", actor_id, got->status().ToString());
      continue;
    }
    if (auto code = Dispatch(t, role, reg, status, std::move(got->value()))) return *code;
  }
}

}  // namespace

int RunActor(const ActorOptions& options) {
  ZmqOptions zo;
  if (!options.keys_path.empty()) {
    auto keys = LoadActorKeys(options.keys_path);
    if (!keys.ok()) {
      spdlog::error("--keys / {}: {}", kKeysEnv, Msg(keys.status()));
      return kConfigErrorExit;
    }
    zo.curve = *keys;
  }
  zo.watch_handshake = true;
  zmq::context_t ctx;
  auto transport = ZmqClientTransport::Connect(ctx, options.connect, zo);
  if (!transport.ok()) {
    spdlog::error("{}", transport.status().ToString());
    return kConfigErrorExit;
  }
  auto reg = Register(**transport, options, RandomInstanceId());
  if (!reg.ok()) {
    spdlog::error("{}", Msg(reg.status()));
    return reg.status().code() == absl::StatusCode::kPermissionDenied ? kConfigErrorExit : 1;
  }
  const proto::Assignment& a = reg->assignment;
  spdlog::info("registered as {} (rank {} of {}) in job {}", a.actor_id(), a.rank(), a.world_size(),
               reg->job_id);

  // Heartbeats start before the role is built: building it (loading a checkpoint) may keep
  // this thread busy far longer than the controller's heartbeat silence allows.
  ActorStatus status;
  status.state = proto::Heartbeat::SETTING_UP;
  status.set_phase("reading the job's config");
  HeartbeatSender::Options hbo;
  hbo.endpoint = options.connect;
  hbo.actor_id = a.actor_id();
  hbo.job_id = reg->job_id;
  hbo.curve = zo.curve;
  hbo.interval_ms = static_cast<int>(a.heartbeat_interval_ms());
  // A controller that exited closed the connection: seconds, on any host. Silence alone (a
  // host or network gone) is given longer, since a busy controller answers late. Local actors
  // also die with it (PDEATHSIG).
  const int silence_ms = static_cast<int>(a.heartbeat_interval_ms() * a.heartbeat_misses());
  hbo.controller_timeout_ms = std::max(10'000, 4 * silence_ms);
  // Not sooner than the controller would declare this actor dead: a link down for less (a
  // network blip) does not end an actor the controller still counts.
  hbo.disconnect_grace_ms = std::max(1'500, silence_ms);
  hbo.exit_grace_ms = 5'000;  // a request under way when it was lost gets this long
  HeartbeatSender heartbeat(ctx, hbo, &status);
  heartbeat.Start();

  LoadedJob job = LoadJobText(a.config_yaml(), "<config from controller>");
  if (!job.ok()) {
    const std::string errors = config::FormatErrors(job.errors);
    spdlog::error("the controller's config does not load here (version skew?):\n{}", errors);
    return ReportSetupFailure(**transport, *reg,
                              "the job's config does not load here (version skew?): " + errors);
  }
  status.set_phase(absl::StrCat("building the ", a.role(), " role"));
  const SetupProgress progress = [&](const std::string& phase) {
    status.set_phase(phase);
    if (options.setup_delay_ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(options.setup_delay_ms));
    }
  };
  auto role = options.create_role(a.role(), job.config, a, progress);
  if (!role.ok()) {
    spdlog::error("{}: cannot start role {}: {}", a.actor_id(), a.role(), role.status().ToString());
    // A crash-like failure may pass in a replacement; a config error would only repeat.
    if (!IsInputError(role.status())) return 1;
    return ReportSetupFailure(
        **transport, *reg,
        absl::StrCat("cannot set up role ", a.role(), ": ", role.status().message()));
  }
  status.policy_version = (*role)->policy_version();
  status.state = proto::Heartbeat::IDLE;
  spdlog::info("{}: set up", a.actor_id());
  int code = Serve(**transport, **role, *reg, status, heartbeat, options);
  status.state = proto::Heartbeat::STOPPING;
  heartbeat.Stop();
  return code;
}

}  // namespace rlforge
