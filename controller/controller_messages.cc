// Controller's message handling: what Pump does with each message received (registration,
// heartbeats and set-up progress, results, rejects), controller.h.
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/status.h"
#include "controller/controller.h"

namespace rlforge {

namespace {

std::string PeerName(const std::string& peer) {
  std::string hex;
  for (unsigned char c : peer) absl::StrAppend(&hex, absl::Hex(c, absl::kZeroPad2));
  return hex;
}

}  // namespace

Message Controller::NewMessage() const {
  Message m;
  m.envelope.set_job_id(options_.job_id);
  m.envelope.set_sender("controller");
  return m;
}

void Controller::Reject(const std::string& peer, const std::string& reason) {
  Message m = NewMessage();
  m.envelope.mutable_reject()->set_reason(reason);
  transport_->Send(peer, std::move(m)).IgnoreError();  // best effort: the peer may be gone
}

void Controller::Handle(Received r) {
  if (!r.message.ok()) {
    const absl::Status& s = r.message.status();
    switch (s.code()) {
      case absl::StatusCode::kFailedPrecondition:
        ++drops_.wrong_version;
        Reject(r.peer, std::string(s.message()));
        break;
      case absl::StatusCode::kResourceExhausted:
        ++drops_.oversized;
        break;
      default:
        ++drops_.malformed;
    }
    spdlog::warn("dropped a message of {} bytes from peer {}: {}", r.wire_bytes, PeerName(r.peer),
                 Msg(s));
    return;
  }
  Message msg = std::move(r.message).value();
  const proto::Envelope& env = msg.envelope;
  if (env.has_register_()) {
    HandleRegister(r.peer, env);
    return;
  }
  ActorInfo* a = registry_.Find(env.sender());
  if (a != nullptr && a->state == ActorState::kDead) {
    // A lost actor that was only stopped (SIGSTOP) may still speak; its work went elsewhere.
    ++drops_.from_lost_actor;
    spdlog::debug("dropped {} from {}, declared dead", BodyName(env), a->id);
    return;
  }
  if (a == nullptr || a->state == ActorState::kPending) {
    ++drops_.unknown_sender;
    spdlog::warn("dropped {} from unregistered sender '{}'", BodyName(env), env.sender());
    Reject(r.peer, "not registered: send Register first");
    return;
  }
  if (env.job_id() != options_.job_id) {
    ++drops_.wrong_job;
    spdlog::warn("dropped {} from {}: job id '{}' is not this job's", BodyName(env), a->id,
                 env.job_id());
    return;
  }
  if (r.peer != a->work_peer && r.peer != a->heartbeat_peer && !env.has_heartbeat()) {
    ++drops_.unknown_sender;
    spdlog::warn("dropped {} claiming to be {} from another connection", BodyName(env), a->id);
    return;
  }
  a->last_heard_us = clock_->NowMicros();
  switch (env.body_case()) {
    case proto::Envelope::kHeartbeat: {
      a->heartbeat_peer = r.peer;
      a->policy_version = env.heartbeat().policy_version();
      a->works_done = env.heartbeat().works_done();
      a->current_work_id = env.heartbeat().current_work_id();
      NoteSetup(*a, env.heartbeat());
      Message ack = NewMessage();
      ack.envelope.mutable_heartbeat_ack();
      transport_->Send(r.peer, std::move(ack)).IgnoreError();
      return;
    }
    case proto::Envelope::kWorkResult:
      HandleResult(*a, std::move(msg));
      return;
    case proto::Envelope::kMetrics:
      if (metrics_sink_) metrics_sink_(a->id, env.metrics());
      return;
    case proto::Envelope::kLeave:
      HandleLeave(*a, r.peer, env.leave().reason());
      return;
    case proto::Envelope::kSetupFailed:
      HandleSetupFailed(*a, r.peer, env.setup_failed().error());
      return;
    default:
      spdlog::warn("ignored unexpected {} from {}", BodyName(env), a->id);
  }
}

void Controller::HandleRegister(const std::string& peer, const proto::Envelope& env) {
  const proto::Register& reg = env.register_();
  if (!env.job_id().empty() && env.job_id() != options_.job_id) {
    ++drops_.wrong_job;
    Reject(peer,
           absl::StrCat("this controller runs job ", options_.job_id, ", not ", env.job_id()));
    return;
  }
  if (awaiting_store_ && (reg.role() == kTrainerRole || reg.role() == kRolloutRole)) {
    spdlog::debug("{} actor from {} waits for the store's address", reg.role(), reg.host());
    return;
  }
  ActorInfo* a = registry_.FindByInstance(reg.instance_id());
  if (a == nullptr) {
    std::string why;
    auto slot = registry_.ChooseSlot(reg.role(), reg.requested_rank(), reg.launch_token(), &why);
    if (!slot) {
      std::vector<std::string> roles = registry_.Roles();
      spdlog::warn("refused {} actor from {} pid {}: {}", reg.role(), reg.host(), reg.pid(), why);
      Reject(peer, why);
      return;
    }
    a = registry_.Find(*slot);
    const bool joined = a->elastic || a->state == ActorState::kLeft;
    a->after_leave = a->state == ActorState::kLeft;
    a->instance_id = reg.instance_id();
    a->host = reg.host();
    a->pid = reg.pid();
    a->work_peer = peer;
    a->registered_us = clock_->NowMicros();
    a->last_heard_us = a->registered_us;
    a->state = ActorState::kReady;
    a->setting_up = false;
    a->setup_phase.clear();
    ++a->incarnation;
    spdlog::info("{} registered from {} (pid {})", a->id, a->host, a->pid);
    if (joined) {
      ++elastic_.joins;
      Emit({.kind = "joined",
            .actor_id = a->id,
            .detail = absl::StrCat("pid ", a->pid, " on ", a->host, "; ",
                                   registry_.LiveOfRole(a->role).size(), " ", a->role, " live")});
    } else if (a->incarnation > 1) {
      FaultEvent e;
      e.kind = "rejoined";
      e.actor_id = a->id;
      e.detail = absl::StrCat("pid ", a->pid, " on ", a->host);
      e.down_s = static_cast<double>(a->registered_us - a->lost_at_us) * 1e-6;
      ++faults_.rejoins;
      Emit(std::move(e));
    }
  }
  // A retried Register gets the same Assignment again.
  Message m = NewMessage();
  proto::Assignment* as = m.envelope.mutable_assignment();
  as->set_actor_id(a->id);
  as->set_role(a->role);
  as->set_rank(a->rank);
  as->set_world_size(registry_.CountOfRole(a->role));
  as->set_config_yaml(options_.config_yaml);
  as->set_heartbeat_interval_ms(static_cast<uint32_t>(options_.heartbeat_interval_ms));
  as->set_heartbeat_misses(static_cast<uint32_t>(options_.heartbeat_misses));
  as->set_run_dir(options_.run_dir);
  as->set_may_leave(registry_.Elastic(a->role));
  if (a->role == kTrainerRole) as->set_collective_timeout_s(options_.collective_timeout_s);
  // The store is where trainer ranks meet, and where trainer rank 0 and the engines form the
  // weight plane's broadcast group (weights.transport: gloo).
  if (a->role == kTrainerRole || a->role == kRolloutRole) {
    as->set_store_address(options_.trainer_store_address);
  }
  transport_->Send(peer, std::move(m)).IgnoreError();
}

void Controller::HandleResult(ActorInfo& actor, Message msg) {
  const proto::WorkResult& res = msg.envelope.work_result();
  auto it = pending_.find(res.work_id());
  if (it == pending_.end() || it->second.done || it->second.actor_id != actor.id) {
    // Results are idempotent: a repeat (or a stray) changes nothing.
    ++drops_.duplicate_results;
    spdlog::debug("ignored result for work {} from {}", res.work_id(), actor.id);
    return;
  }
  Pending& p = it->second;
  EndSetup(actor);  // it answered work: its role is built
  p.done = true;
  p.outcome.actor_id = actor.id;
  p.outcome.result = res;
  p.outcome.tensors = std::move(msg.tensors);
  p.outcome.seconds = static_cast<double>(clock_->NowMicros() - p.submitted_us) * 1e-6;
  actor.policy_version = res.policy_version();
  bool still_busy = false;
  for (const auto& [id, q] : pending_)
    still_busy = still_busy || (!q.done && q.actor_id == actor.id);
  actor.state = still_busy ? ActorState::kBusy : ActorState::kReady;
}

namespace {
// A phase's name, without its progress figure: "loading model 37%" -> "loading model".
std::string_view PhaseName(std::string_view phase) {
  const size_t end = phase.find_last_not_of("0123456789% ");
  return end == std::string_view::npos ? std::string_view() : phase.substr(0, end + 1);
}
// Progress of one phase is logged at most this often; a new phase at once.
constexpr int64_t kSetupLogIntervalUs = 5'000'000;
}  // namespace

void Controller::NoteSetup(ActorInfo& actor, const proto::Heartbeat& heartbeat) {
  const int64_t now = clock_->NowMicros();
  if (heartbeat.state() != proto::Heartbeat::SETTING_UP) {
    EndSetup(actor);
    return;
  }
  if (!actor.setting_up && !actor.setup_phase.empty()) return;  // a late beat after set-up
  actor.setting_up = true;
  if (heartbeat.phase() == actor.setup_phase) return;
  const bool new_phase = PhaseName(heartbeat.phase()) != PhaseName(actor.setup_phase);
  actor.setup_phase = heartbeat.phase();
  if (new_phase || now - actor.setup_logged_us >= kSetupLogIntervalUs) {
    spdlog::info("{} setting up: {}", actor.id, actor.setup_phase);
    actor.setup_logged_us = now;
  }
}

void Controller::EndSetup(ActorInfo& actor) {
  if (actor.setting_up) {
    spdlog::info("{} set up in {:.1f} s", actor.id,
                 static_cast<double>(clock_->NowMicros() - actor.registered_us) * 1e-6);
  }
  actor.setting_up = false;
}

}  // namespace rlforge
