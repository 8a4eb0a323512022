#include "controller/controller.h"

#include <signal.h>

#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/status.h"

namespace rlforge {

namespace {

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
