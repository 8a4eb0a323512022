// The controller's side of worker failure: a recoverable actor that is lost gives its work
// back and its slot is refilled (controller.h, ExpectRole).
//
// lost (exit | missed heartbeats | overdue work) -> Recover: dead, killed, works returned lost
//   -> backoff -> RestartDue: relaunched (pending) -> Register -> ready, incarnation + 1
#include <signal.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/status.h"
#include "controller/controller.h"

namespace rlforge {

namespace {

constexpr double kMaxBackoffS = 30;

}  // namespace

absl::Status Controller::Lose(ActorInfo& actor, const std::string& what) {
  if (!actor.recoverable || shutting_down_) return ActorLost(actor, what);
  Recover(actor, what);
  return absl::OkStatus();
}

int64_t Controller::GiveBackWorks(const ActorInfo& a, const std::string& why, bool left) {
  const int64_t now = clock_->NowMicros();
  int64_t n = 0;
  for (auto& [id, p] : pending_) {
    if (p.done || p.actor_id != a.id) continue;
    p.done = true;
    p.outcome.actor_id = a.id;
    p.outcome.lost = true;
    p.outcome.left = left;
    p.outcome.result.set_work_id(id);
    p.outcome.result.set_ok(false);
    p.outcome.result.set_error(why);
    p.outcome.seconds = static_cast<double>(now - p.submitted_us) * 1e-6;
    ++n;
  }
  return n;
}

void Controller::Recover(ActorInfo& a, const std::string& what) {
  const int64_t now = clock_->NowMicros();
  FaultEvent e;
  e.kind = "lost";
  e.actor_id = a.id;
  // Since it was last heard from; 0 for a replacement lost before it registered.
  e.silent_s = a.last_heard_us > 0 ? static_cast<double>(now - a.last_heard_us) * 1e-6 : 0;
  e.works_given_back = GiveBackWorks(a, absl::StrCat("lost: ", a.id, " ", what), false);
  a.state = ActorState::kDead;
  a.lost_at_us = now;
  a.current_work_id = 0;
  a.instance_id.clear();  // a late Register of the lost process gets no assignment
  a.last_loss = what;
  // A hung or stopped process must not come back with stale work.
  if (launcher_ != nullptr && a.launched_pid > 0) launcher_->Signal(a.launched_pid, SIGKILL);
  e.detail = what;
  if (a.elastic) {
    a.state = ActorState::kVacant;  // not waited for: a join may fill it
    absl::StrAppend(&e.detail, "; its slot is open to a join");
  } else if (a.external) {
    a.state = ActorState::kPending;  // open to a rejoin by hand
    absl::StrAppend(&e.detail, "; its slot waits for `", JoinCommand(a), "`");
  } else if (restarts_by_role_[a.role] < options_.max_restarts && make_spec_) {
    ++restarts_by_role_[a.role];  // spent when scheduled: two lost at once cannot overdraw it
    const double backoff =
        std::min(kMaxBackoffS, options_.restart_backoff_s * std::pow(2.0, a.restarts));
    a.restart_at_us = now + static_cast<int64_t>(backoff * 1e6);
    absl::StrAppend(&e.detail, absl::StrFormat("; restart in %.1f s", backoff));
  } else {
    absl::StrAppend(&e.detail, "; no restart left (launch.max_restarts ", options_.max_restarts,
                    " per role)");
  }
  ++faults_.actors_lost;
  faults_.works_given_back += static_cast<uint64_t>(e.works_given_back);
  spdlog::warn("{} lost: {} ({} work(s) given back)", a.id, e.detail, e.works_given_back);
  Emit(std::move(e));
}

absl::Status Controller::ServiceLost(Service s, const ProcessExit& exit) {
  const std::string what = absl::StrCat(s.name, " (pid ", exit.pid, ") ", exit.Describe());
  if (exit.ConfigError()) {
    // A server started with the job's settings (an env id, a command) that it cannot serve:
    // another start would fail the same way.
    std::string msg = absl::StrCat(
        what, ": it cannot work with the job's config; config errors are not retried; its log: ",
        s.log_path);
    std::string tail = TailOfFile(s.log_path, 8);
    if (!tail.empty()) absl::StrAppend(&msg, "\n  last lines:\n", tail);
    config_failure_ = absl::FailedPreconditionError(msg);
    return config_failure_;
  }
  ActorInfo* owner = s.owner.empty() ? nullptr : registry_.Find(s.owner);
  const bool budget = restarts_by_role_[s.role] < options_.max_restarts;
  if (owner == nullptr || !owner->recoverable || shutting_down_ || !budget) {
    std::string msg = absl::StrCat(what, "; its log: ", s.log_path);
    if (owner != nullptr && owner->recoverable && !budget) {
      absl::StrAppend(&msg, "; no restart left (launch.max_restarts ", options_.max_restarts,
                      " per role)");
    }
    std::string tail = TailOfFile(s.log_path, 8);
    if (!tail.empty()) absl::StrAppend(&msg, "\n  last lines:\n", tail);
    ++faults_.fatal_losses;
    return absl::UnavailableError(msg);
  }
  ++restarts_by_role_[s.role];
  ++faults_.actors_lost;
  FaultEvent lost;
  lost.kind = "lost";
  lost.actor_id = s.name;
  lost.detail = absl::StrCat(what, "; restart now");
  Emit(std::move(lost));
  spdlog::warn("{} lost: {}; restarting it, and {} with it", s.name, what, owner->id);
  absl::StatusOr<int> pid = launcher_->Start(s.spec);
  if (!pid.ok()) return Annotate(pid.status(), "restarting " + s.name);
  ++faults_.restarts;
  FaultEvent restart;
  restart.kind = "restart";
  restart.actor_id = s.name;
  restart.detail = absl::StrCat("pid ", *pid, ", restart ", restarts_by_role_[s.role], " of ",
                                options_.max_restarts, " for role ", s.role);
  Emit(std::move(restart));
  spdlog::info("restarted {} (pid {}), log {}", s.name, *pid, s.log_path);
  const std::string name = s.name;
  services_[*pid] = std::move(s);
  // Its owner's connection and envs went with it: the owner's replacement starts afresh.
  if (owner->state == ActorState::kReady || owner->state == ActorState::kBusy) {
    return Lose(*owner, absl::StrCat("lost its ", name, " (", exit.Describe(), ")"));
  }
  return absl::OkStatus();
}

absl::Status Controller::RestartDue() {
  const int64_t now = clock_->NowMicros();
  const int64_t register_limit = static_cast<int64_t>(options_.register_timeout_s * 1e6);
  for (const ActorInfo* info : registry_.All()) {
    ActorInfo& a = *registry_.Find(info->id);
    if (a.state == ActorState::kPending && a.relaunched_us > 0 &&
        now - a.relaunched_us > register_limit) {
      Recover(a, absl::StrFormat("(relaunched) did not register within %.0f s "
                                 "(controller.register_timeout_s)",
                                 options_.register_timeout_s));
      continue;
    }
    if (a.state != ActorState::kDead || a.restart_at_us == 0 || now < a.restart_at_us) continue;
    a.restart_at_us = 0;
    a.launch_token = absl::StrFormat("%016x%08x", now, a.restarts + 1);
    ProcessSpec spec = make_spec_(a);
    spec.env["RLFORGE_LAUNCH_TOKEN"] = a.launch_token;
    absl::StatusOr<int> pid = launcher_->Start(spec);
    if (!pid.ok()) return Annotate(pid.status(), "relaunching " + a.id);
    a.launched_pid = *pid;
    a.pid = 0;
    a.last_heard_us = 0;
    a.host.clear();
    a.instance_id.clear();
    a.state = ActorState::kPending;
    a.relaunched_us = now;
    ++a.restarts;
    ++faults_.restarts;
    FaultEvent e;
    e.kind = "restart";
    e.actor_id = a.id;
    e.detail = absl::StrCat("pid ", *pid, ", restart ", restarts_by_role_[a.role], " of ",
                            options_.max_restarts, " for role ", a.role);
    spdlog::info("restarted {} ({}), log {}", a.id, e.detail, spec.log_path);
    Emit(std::move(e));
  }
  return absl::OkStatus();
}

absl::Status Controller::AwaitLive(const std::string& role, int min_live,
                                   const std::string& min_key) {
  const double limit_s = options_.register_timeout_s + kMaxBackoffS;
  const int64_t deadline = clock_->NowMicros() + static_cast<int64_t>(limit_s * 1e6);
  const std::string wanted = min_live == 1 ? absl::StrCat("a live ", role, " actor")
                                           : absl::StrCat(min_live, " live ", role, " actors");
  const std::string key = min_key.empty() ? "" : absl::StrCat(" (", min_key, ")");
  bool announced = false;
  while (static_cast<int>(registry_.LiveOfRole(role).size()) < min_live) {
    const size_t live = registry_.LiveOfRole(role).size();
    std::string why;
    bool coming = registry_.OpenToJoin(role);
    for (const std::string& id : registry_.IdsOfRole(role)) {
      const ActorInfo& a = *registry_.Find(id);
      coming = coming || a.state == ActorState::kPending || a.restart_at_us > 0;
      if (a.state == ActorState::kVacant && a.incarnation == 0) continue;  // never joined
      absl::StrAppend(&why, "\n  ", id, ": ", ActorStateName(a.state), ", ", a.restarts,
                      " restart(s)", a.last_loss.empty() ? "" : ", last lost: " + a.last_loss);
    }
    if (!coming) {
      return absl::UnavailableError(absl::StrCat(
          min_live == 1 ? absl::StrCat("no live ", role, " actor")
                        : absl::StrCat(role, ": ", live, " live of ", min_live, " needed", key),
          " and none coming back (launch.max_restarts ", options_.max_restarts, " per role, ",
          restarts_by_role_[role], " used):", why));
    }
    if (clock_->NowMicros() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("waited ", limit_s, " s for ", wanted, key, ", have ", live,
                       " (controller.register_timeout_s + the largest backoff):", why));
    }
    if (!announced) {
      const std::string status = absl::StrCat(
          "waiting for ", wanted, key, ": ", live, " live of minimum ", min_live,
          registry_.OpenToJoin(role) ? absl::StrCat("; join one with `rlforge actor --role ", role,
                                                    " --connect ", join_address(), "`")
                                     : "");
      spdlog::warn("{}:{}", status, why);
      if (status_sink_) status_sink_("waiting", status);
      announced = true;
    }
    RETURN_IF_ERROR(Pump(options_.poll_ms));
  }
  if (announced) {
    spdlog::info("{}: {} live, at least {}; the job goes on", role,
                 registry_.LiveOfRole(role).size(), min_live);
    if (status_sink_) status_sink_("running", "");
  }
  return absl::OkStatus();
}

void Controller::HandleLeave(ActorInfo& a, const std::string& peer, const std::string& reason) {
  if (!registry_.Elastic(a.role) && !shutting_down_) {
    // Its Assignment said it may not: it exits as it would have, and that is noticed as a loss.
    spdlog::warn("{} asked to leave ({}), but role {} is not elastic", a.id, reason, a.role);
    return;
  }
  Message bye = NewMessage();
  bye.envelope.mutable_shutdown()->set_reason("leave accepted");
  transport_->Send(peer, std::move(bye)).IgnoreError();
  if (shutting_down_) return;
  FaultEvent e;
  e.kind = "left";
  e.actor_id = a.id;
  e.works_given_back = GiveBackWorks(a, absl::StrCat(a.id, " left: ", reason), true);
  a.state = ActorState::kLeft;
  a.current_work_id = 0;
  a.instance_id.clear();
  // Not relaunched: whoever sent SIGTERM meant the worker to go. Its exit is expected.
  if (a.launched_pid > 0) left_pids_[a.launched_pid] = a.id;
  a.launched_pid = 0;
  a.restart_at_us = 0;
  ++elastic_.leaves;
  elastic_.works_handed_back += static_cast<uint64_t>(e.works_given_back);
  e.detail = absl::StrCat(reason, "; ", registry_.LiveOfRole(a.role).size(), " ", a.role,
                          " live; its slot is open to `", JoinCommand(a), "`");
  spdlog::info("{} left: {} ({} work(s) handed back)", a.id, e.detail, e.works_given_back);
  Emit(std::move(e));
}

void Controller::HandleSetupFailed(ActorInfo& a, const std::string& peer,
                                   const std::string& error) {
  Message bye = NewMessage();
  bye.envelope.mutable_shutdown()->set_reason(
      "the job stops: this worker's set-up failed on the job's config");
  transport_->Send(peer, std::move(bye)).IgnoreError();
  if (shutting_down_ || !config_failure_.ok()) return;
  ConfigFailure(a, "failed its set-up on the job's config: " + error, /*with_log_tail=*/false)
      .IgnoreError();  // Pump returns it
}

absl::Status Controller::ConfigFailure(ActorInfo& a, const std::string& what, bool with_log_tail) {
  a.state = ActorState::kStopped;  // its exit is expected; it is not lost
  std::string msg =
      absl::StrCat(a.id, a.pid ? absl::StrCat(" (pid ", a.pid, " on ", a.host, ")") : "", " ", what,
                   "; config errors are not retried: fix the config and run the job again");
  if (!a.log_path.empty()) absl::StrAppend(&msg, "; its log: ", a.log_path);
  if (with_log_tail && !a.log_path.empty()) {
    std::string tail = TailOfFile(a.log_path, 8);
    if (!tail.empty()) absl::StrAppend(&msg, "\n  last lines:\n", tail);
  }
  config_failure_ = absl::FailedPreconditionError(msg);  // the job's end reports it
  return config_failure_;
}

void Controller::Emit(FaultEvent event) {
  if (fault_sink_) fault_sink_(event);
}

}  // namespace rlforge
