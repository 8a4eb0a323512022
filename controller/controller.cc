#include "controller/controller.h"

#include <signal.h>

#include <numeric>
#include <random>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/status.h"

namespace rlforge {

namespace {

std::string PeerName(const std::string& peer) {
  std::string hex;
  for (unsigned char c : peer) absl::StrAppend(&hex, absl::Hex(c, absl::kZeroPad2));
  return hex;
}

std::string RandomToken() {
  std::random_device rd;
  return absl::StrFormat("%08x%08x%08x", rd(), rd(), rd());
}

}  // namespace

Controller::Controller(Options options, ServerTransport* transport, const Clock* clock,
                       ProcessLauncher* launcher, const std::atomic<int>* stop)
    : options_(std::move(options)),
      transport_(transport),
      clock_(clock),
      launcher_(launcher),
      stop_(stop) {}

void Controller::ExpectRole(const std::string& role, int count, bool external, bool recoverable) {
  registry_.ExpectRole(role, count, external, recoverable);
}

void Controller::AllowJoins(const std::string& role, int max_count) {
  registry_.AllowJoins(role, max_count);
}

absl::Status Controller::LaunchAll(const std::function<ProcessSpec(const ActorInfo&)>& make_spec) {
  make_spec_ = make_spec;
  for (const ActorInfo* a : registry_.All()) {
    if (a->external) continue;
    if (launcher_ == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat(a->id, " must be launched, but this controller has no launcher"));
    }
    ActorInfo* slot = registry_.Find(a->id);
    slot->launch_token = RandomToken();
    ProcessSpec spec = make_spec(*slot);
    spec.env["RLFORGE_LAUNCH_TOKEN"] = slot->launch_token;
    ASSIGN_OR_RETURN(int pid, launcher_->Start(spec));
    slot->launched_pid = pid;
    slot->log_path = spec.log_path;
    spdlog::info("started {} (pid {}), log {}", slot->id, pid, spec.log_path);
  }
  return absl::OkStatus();
}

absl::Status Controller::LaunchService(const ProcessSpec& spec, const std::string& owner,
                                       const std::string& role) {
  if (launcher_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("cannot start ", spec.name, ": no launcher"));
  }
  ASSIGN_OR_RETURN(int pid, launcher_->Start(spec));
  services_[pid] = Service{spec.name, spec.log_path, owner, role, spec};
  spdlog::info("started {} (pid {}), log {}", spec.name, pid, spec.log_path);
  return absl::OkStatus();
}

absl::Status Controller::WaitForActors() {
  const int trainers = registry_.CountOfRole(kTrainerRole);
  if (trainers > 1 && options_.trainer_store_address.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the ", trainers, " trainer ranks have no rendezvous store to meet at ",
                     "(Controller::Options::trainer_store_address is empty)"));
  }
  int64_t start = clock_->NowMicros();
  int64_t deadline = start + static_cast<int64_t>(options_.register_timeout_s * 1e6);
  bool announced = false;
  while (true) {
    RETURN_IF_ERROR(Pump(options_.poll_ms));
    auto pending = registry_.Pending();
    if (pending.empty()) return absl::OkStatus();
    if (!announced) {
      for (const ActorInfo* a : pending) {
        if (a->external) spdlog::info("waiting for {} to join: {}", a->id, JoinCommand(*a));
      }
      announced = true;
    }
    if (clock_->NowMicros() > deadline) {
      std::string who;
      for (const ActorInfo* a : pending) {
        absl::StrAppend(&who, "\n  ", a->id,
                        a->external
                            ? " (external: start it with `" + JoinCommand(*a) + "`)"
                            : absl::StrCat(" (pid ", a->launched_pid, ", log ", a->log_path, ")"));
      }
      return absl::DeadlineExceededError(absl::StrCat(
          "timed out after ", options_.register_timeout_s,
          " s (controller.register_timeout_s) waiting for actors to register; still missing ",
          pending.size(), " of ", registry_.ConfiguredCount(), ":", who));
    }
  }
}

std::string Controller::JoinCommand(const ActorInfo& a) const {
  return absl::StrCat(
      "rlforge actor --role ", a.role, " --rank ", a.rank, " --connect ", join_address(),
      options_.actor_keys_path.empty() ? "" : absl::StrCat(" --keys ", options_.actor_keys_path));
}

absl::StatusOr<uint64_t> Controller::Submit(const std::string& actor_id, proto::WorkRequest request,
                                            std::vector<TensorFrame> tensors) {
  ActorInfo* a = registry_.Find(actor_id);
  if (a == nullptr) return absl::NotFoundError(absl::StrCat("no actor ", actor_id));
  if (a->state != ActorState::kReady && a->state != ActorState::kBusy) {
    return absl::FailedPreconditionError(
        absl::StrCat("actor ", actor_id, " is ", ActorStateName(a->state)));
  }
  uint64_t id = next_work_id_++;
  request.set_work_id(id);
  Message m = NewMessage();
  *m.envelope.mutable_work_request() = std::move(request);
  m.tensors = std::move(tensors);
  absl::Status s = transport_->Send(a->work_peer, std::move(m));
  Pending p;
  p.actor_id = actor_id;
  p.submitted_us = clock_->NowMicros();
  pending_[id] = std::move(p);
  if (!s.ok()) {
    absl::Status lost = Lose(*a, absl::StrCat("cannot be reached (", s.message(), ")"));
    if (!lost.ok()) pending_.erase(id);
    RETURN_IF_ERROR(lost);
    return id;  // Recover gave it back lost
  }
  a->state = ActorState::kBusy;
  return id;
}

absl::StatusOr<std::vector<WorkOutcome>> Controller::AwaitAll(
    const std::vector<uint64_t>& work_ids) {
  for (uint64_t id : work_ids) {
    if (!pending_.count(id)) return absl::NotFoundError(absl::StrCat("unknown work id ", id));
  }
  while (true) {
    bool all = true;
    for (uint64_t id : work_ids) {
      const Pending& p = pending_.at(id);
      if (p.done && !p.outcome.result.ok()) {
        absl::Status failed = absl::AbortedError(absl::StrCat(
            "work ", id, " failed on ", p.outcome.actor_id, ": ", p.outcome.result.error()));
        if (work_ids.size() > 1) failed = CauseOf(failed);
        for (uint64_t given_up : work_ids) pending_.erase(given_up);
        return failed;
      }
      all = all && p.done;
    }
    if (all) break;
    RETURN_IF_ERROR(Pump(options_.poll_ms));
  }
  std::vector<WorkOutcome> out;
  out.reserve(work_ids.size());
  for (uint64_t id : work_ids) out.push_back(std::move(pending_.extract(id).mapped().outcome));
  return out;
}

absl::Status Controller::CauseOf(const absl::Status& failed) {
  // Ranks that work together fail together: when one dies, its peers' collectives fail at
  // once (connection reset), often before its exit is reaped. Serve up to a second more so
  // the job names the rank that died, not the first peer that noticed.
  const int64_t until = clock_->NowMicros() + 1'000'000;
  for (int polls = 1000 / std::max(1, options_.poll_ms) + 1;
       polls > 0 && clock_->NowMicros() < until; --polls) {
    absl::Status lost = Pump(options_.poll_ms);
    if (!lost.ok()) {
      return absl::Status(lost.code(), absl::StrCat(lost.message(), "\n  then ", failed.message()));
    }
  }
  return failed;
}

absl::StatusOr<std::pair<size_t, WorkOutcome>> Controller::AwaitAny(
    const std::vector<uint64_t>& work_ids) {
  return AwaitFirst(work_ids, /*give_back_lost=*/false);
}

absl::StatusOr<std::pair<size_t, WorkOutcome>> Controller::AwaitNext(
    const std::vector<uint64_t>& work_ids) {
  return AwaitFirst(work_ids, /*give_back_lost=*/true);
}

absl::StatusOr<std::vector<WorkOutcome>> Controller::AwaitEach(
    const std::vector<uint64_t>& work_ids) {
  std::vector<WorkOutcome> out(work_ids.size());
  std::vector<uint64_t> waiting = work_ids;
  std::vector<size_t> index(work_ids.size());
  std::iota(index.begin(), index.end(), size_t{0});
  while (!waiting.empty()) {
    ASSIGN_OR_RETURN(auto next, AwaitNext(waiting));
    out[index[next.first]] = std::move(next.second);
    waiting.erase(waiting.begin() + static_cast<std::ptrdiff_t>(next.first));
    index.erase(index.begin() + static_cast<std::ptrdiff_t>(next.first));
  }
  return out;
}

absl::StatusOr<std::pair<size_t, WorkOutcome>> Controller::AwaitFirst(
    const std::vector<uint64_t>& work_ids, bool give_back_lost) {
  if (work_ids.empty()) return absl::InvalidArgumentError("AwaitAny of no work");
  for (uint64_t id : work_ids) {
    if (!pending_.count(id)) return absl::NotFoundError(absl::StrCat("unknown work id ", id));
  }
  while (true) {
    for (size_t k = 0; k < work_ids.size(); ++k) {
      const Pending& p = pending_.at(work_ids[k]);
      if (!p.done) continue;
      if (!p.outcome.result.ok() && !(give_back_lost && p.outcome.lost)) {
        absl::Status failed =
            absl::AbortedError(absl::StrCat("work ", work_ids[k], " failed on ", p.outcome.actor_id,
                                            ": ", p.outcome.result.error()));
        if (work_ids.size() > 1) failed = CauseOf(failed);
        for (uint64_t given_up : work_ids) pending_.erase(given_up);
        return failed;
      }
      return std::make_pair(k, std::move(pending_.extract(work_ids[k]).mapped().outcome));
    }
    RETURN_IF_ERROR(Pump(options_.poll_ms));
  }
}

absl::StatusOr<size_t> Controller::AwaitReady(const std::vector<uint64_t>& work_ids) {
  if (work_ids.empty()) return absl::InvalidArgumentError("AwaitReady of no work");
  for (uint64_t id : work_ids) {
    if (!pending_.count(id)) return absl::NotFoundError(absl::StrCat("unknown work id ", id));
  }
  while (true) {
    for (size_t k = 0; k < work_ids.size(); ++k) {
      if (pending_.at(work_ids[k]).done) return k;
    }
    RETURN_IF_ERROR(Pump(options_.poll_ms));
  }
}

absl::StatusOr<WorkOutcome> Controller::Await(uint64_t work_id) {
  ASSIGN_OR_RETURN(auto all, AwaitAll({work_id}));
  return std::move(all[0]);
}

absl::Status Controller::Stopped() const {
  if (stop_ == nullptr || stop_->load() == 0) return absl::OkStatus();
  int sig = stop_->load();
  return absl::CancelledError(
      absl::StrCat("interrupted by signal ", sig, " (", strsignal(sig), ")"));
}

absl::Status Controller::Pump(int timeout_ms) {
  RETURN_IF_ERROR(Stopped());
  RETURN_IF_ERROR(config_failure_);
  // Wait for the first message, then drain what is queued without waiting, so
  // heartbeats that queued up while the caller was busy count before the
  // liveness check.
  auto r = transport_->Receive(timeout_ms);
  bool drained = true;
  for (int n = 0; r.has_value(); ++n) {
    Handle(std::move(*r));
    if (n >= 10'000) {
      drained = false;
      break;
    }
    r = transport_->Receive(0);
  }
  drops_.unauthenticated = transport_->refused_handshakes();
  // Before the health check: the worker that reported a config error is about to exit.
  if (!config_failure_.ok()) return config_failure_;
  absl::Status health = drained ? CheckHealth() : absl::OkStatus();
  if (pump_observer_) pump_observer_();
  // A signal that stops the whole job (scancel signals every step at once) also ends its
  // actors: their exits are the stop's doing, not failures.
  if (!health.ok() && !Stopped().ok()) return Stopped();
  return health;
}

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

absl::Status Controller::ActorLost(const ActorInfo& actor, const std::string& what) {
  ActorInfo* a = registry_.Find(actor.id);
  a->state = ActorState::kDead;
  if (!shutting_down_) ++faults_.fatal_losses;
  std::string msg =
      absl::StrCat("actor ", a->id,
                   a->pid ? absl::StrCat(" (pid ", a->pid, " on ", a->host, ")") : "", " ", what);
  if (!a->log_path.empty()) {
    absl::StrAppend(&msg, "; its log: ", a->log_path);
    std::string tail = TailOfFile(a->log_path, 8);
    if (!tail.empty()) absl::StrAppend(&msg, "\n  last lines:\n", tail);
  }
  return absl::UnavailableError(msg);
}

absl::Status Controller::CheckHealth() {
  if (launcher_ != nullptr && !shutting_down_) {
    for (const ProcessExit& e : launcher_->Reap()) {
      if (auto it = services_.find(e.pid); it != services_.end()) {
        Service lost = std::move(it->second);
        services_.erase(it);
        RETURN_IF_ERROR(ServiceLost(std::move(lost), e));
        continue;
      }
      if (auto left = left_pids_.find(e.pid); left != left_pids_.end()) {
        spdlog::info("{} (pid {}) {} after leaving", left->second, e.pid, e.Describe());
        left_pids_.erase(left);
        continue;
      }
      ActorInfo* a = registry_.FindByLaunchedPid(e.pid);
      if (a == nullptr || a->state == ActorState::kDead) continue;  // already handled
      if (a->pid == 0) a->pid = e.pid;
      if (a->host.empty()) a->host = "localhost";
      if (e.ConfigError()) {
        return ConfigFailure(*a,
                             absl::StrCat(e.Describe(), ": it cannot work with the job's config"),
                             /*with_log_tail=*/true);
      }
      RETURN_IF_ERROR(Lose(*a, e.Describe()));
    }
    RETURN_IF_ERROR(RestartDue());
  }
  int64_t now = clock_->NowMicros();
  int64_t silence_limit = options_.heartbeat_interval_ms * options_.heartbeat_misses * 1000;
  for (const ActorInfo* a : registry_.All()) {
    if (a->state != ActorState::kReady && a->state != ActorState::kBusy) continue;
    int64_t silent = now - a->last_heard_us;
    if (silent > silence_limit) {
      RETURN_IF_ERROR(
          Lose(*registry_.Find(a->id),
               absl::StrCat(absl::StrFormat("missed %d heartbeats (silent for %.1f s)",
                                            options_.heartbeat_misses, silent * 1e-6),
                            a->setting_up ? " while setting up: " + a->setup_phase : "")));
    }
  }
  const int64_t setup_limit = static_cast<int64_t>(options_.setup_timeout_s * 1e6);
  for (const ActorInfo* a : registry_.All()) {
    if (a->state != ActorState::kReady && a->state != ActorState::kBusy) continue;
    if (a->setting_up && now - a->registered_us > setup_limit) {
      RETURN_IF_ERROR(Lose(*registry_.Find(a->id),
                           absl::StrFormat("did not finish its set-up within %.0f s "
                                           "(controller.setup_timeout_s); last phase: %s",
                                           options_.setup_timeout_s, a->setup_phase)));
    }
  }
  int64_t work_limit = static_cast<int64_t>(options_.request_timeout_s * 1e6);
  for (const auto& [id, p] : pending_) {
    if (!p.done && now - p.submitted_us > work_limit) {
      RETURN_IF_ERROR(Lose(
          *registry_.Find(p.actor_id),
          absl::StrFormat("did not finish work %d within %.0f s (controller.request_timeout_s)", id,
                          options_.request_timeout_s)));
    }
  }
  return absl::OkStatus();
}

void Controller::Shutdown(const std::string& reason) {
  shutting_down_ = true;
  for (const ActorInfo* a : registry_.All()) {
    if (a->state == ActorState::kReady || a->state == ActorState::kBusy) {
      Message m = NewMessage();
      m.envelope.mutable_shutdown()->set_reason(reason);
      transport_->Send(a->work_peer, std::move(m)).IgnoreError();
    }
  }
  if (launcher_ == nullptr) return;
  // Services hold no state worth a grace period.
  for (const auto& [pid, service] : services_) launcher_->Signal(pid, SIGTERM);
  // An actor declared dead (a hung rank) may still hold its peers in a collective, so they
  // could not act on the shutdown either: kill it now, which frees them at once.
  for (const ActorInfo* a : registry_.All()) {
    if (a->state == ActorState::kDead && a->launched_pid > 0) {
      launcher_->Signal(a->launched_pid, SIGKILL);
    }
  }
  auto wait_for_exit = [&](double seconds) {
    int64_t until = clock_->NowMicros() + static_cast<int64_t>(seconds * 1e6);
    // The poll count bounds the wait too, should the clock not move (tests).
    int64_t polls = static_cast<int64_t>(seconds * 1000 / std::max(1, options_.poll_ms)) + 1;
    for (int64_t i = 0; i < polls && !launcher_->Running().empty(); ++i) {
      for (const ProcessExit& e : launcher_->Reap()) {
        ActorInfo* a = registry_.FindByLaunchedPid(e.pid);
        if (a != nullptr && a->state != ActorState::kDead) a->state = ActorState::kStopped;
      }
      if (launcher_->Running().empty() || clock_->NowMicros() >= until) break;
      // Keep answering heartbeats so nobody mistakes shutdown for a lost controller.
      auto r = transport_->Receive(options_.poll_ms);
      while (r.has_value()) {
        Handle(std::move(*r));
        r = transport_->Receive(0);
      }
    }
  };
  wait_for_exit(options_.shutdown_grace_s);
  if (!launcher_->Running().empty()) {
    for (int pid : launcher_->Running()) {
      ActorInfo* a = registry_.FindByLaunchedPid(pid);
      spdlog::warn("{} (pid {}) did not exit in {} s; sending SIGTERM", a ? a->id : "child", pid,
                   options_.shutdown_grace_s);
      launcher_->Signal(pid, SIGTERM);
    }
    wait_for_exit(2.0);
  }
  for (int pid : launcher_->Running()) {
    spdlog::warn("pid {} ignored SIGTERM; sending SIGKILL", pid);
    launcher_->Signal(pid, SIGKILL);
  }
  wait_for_exit(2.0);
}

}  // namespace rlforge
