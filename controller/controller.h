// Controller: the job's hub. Owns the actor registry, their health, and the
// dispatch of work to them.
//
// transport -> Pump (decode, drop bad input, registration, heartbeats,
//   results) -> health checks (exits, missed heartbeats, overdue work) -> Status
//
// The algorithm drives it synchronously: Submit work, then Await results; while
// it waits, the controller keeps serving every actor. Everything runs on the
// caller's thread; the only cross-thread input is the stop flag (signals).
// Transport, clock and launcher are injected so tests need no sockets or sleeps.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "common/role_names.h"
#include "controller/actor_registry.h"
#include "launch/process_launcher.h"
#include "proto/transport.h"

namespace rlforge {

struct WorkOutcome {
  std::string actor_id;
  proto::WorkResult result;
  std::vector<TensorFrame> tensors;
  double seconds = 0;  // submit to result
  // Its actor (a recoverable one) was declared dead before answering: the work is given back
  // to the loop, to be dealt again. `result` is then not ok and its error says why.
  bool lost = false;
  // With `lost`: the actor left on purpose (SIGTERM) and handed the work back; not a fault.
  bool left = false;
};

// A failure, restart or rejoin of a recoverable actor, or a join or leave of an elastic role's
// actor, as the run directory records it.
struct FaultEvent {
  std::string kind;  // "lost", "restart", "rejoined", "joined", "left"
  std::string actor_id;
  std::string detail;            // why it was lost; the pid of a restart; ...
  int64_t works_given_back = 0;  // lost, left: its in-flight works
  double silent_s = 0;           // lost: since the actor was last heard from
  double down_s = 0;             // rejoined: since it was declared dead
};

// Totals over the job of the recoverable actors' failures.
struct FaultStats {
  uint64_t actors_lost = 0;
  uint64_t restarts = 0;
  uint64_t rejoins = 0;
  uint64_t works_given_back = 0;
  // Actors lost that could not be replaced (trainer ranks, services): the job stops, and
  // launch.max_job_restarts may start it again from its newest checkpoint.
  uint64_t fatal_losses = 0;
};

// Totals over the job of elastic roles' joins and leaves (none of them a fault).
struct ElasticStats {
  uint64_t joins = 0;
  uint64_t leaves = 0;
  uint64_t works_handed_back = 0;  // in flight at a leave, given back to the loop
};

// Counts of input the controller refused, by reason.
struct DropStats {
  uint64_t malformed = 0;
  uint64_t wrong_version = 0;
  uint64_t oversized = 0;
  uint64_t unknown_sender = 0;
  uint64_t wrong_job = 0;
  uint64_t duplicate_results = 0;
  uint64_t from_lost_actor = 0;  // sent by an actor after it was declared dead
  // Connections refused at the CURVE handshake (no key, a wrong key): never a message, so not
  // in total().
  uint64_t unauthenticated = 0;
  uint64_t total() const {
    return malformed + wrong_version + oversized + unknown_sender + wrong_job + duplicate_results +
           from_lost_actor;
  }
};

class Controller {
 public:
  struct Options {
    std::string job_id;
    std::string config_yaml;  // sent to every actor in its Assignment
    std::string run_dir;
    // actor.key of a CURVE job, for the join hint of external actors; empty: no CURVE.
    std::string actor_keys_path;
    int64_t heartbeat_interval_ms = 1000;
    int64_t heartbeat_misses = 3;
    double register_timeout_s = 60;
    double request_timeout_s = 600;
    // From registration until the actor's heartbeats leave SETTING_UP.
    double setup_timeout_s = 600;
    double shutdown_grace_s = 5;
    // Poll granularity while waiting; bounds how late a child's exit is noticed.
    int poll_ms = 50;
    // host:port of the rendezvous store of the trainer ranks (dist::StoreServer), sent in every
    // trainer's Assignment when the role has more than one rank; required then.
    std::string trainer_store_address;
    // tcp://HOST:PORT that actors on other hosts join at, for the messages that tell a user how
    // to start one; empty: the transport's endpoint.
    std::string join_address;
    // Sent in every trainer's Assignment (trainer.collective_timeout_s).
    double collective_timeout_s = 60;
    // Relaunches of a role's lost launched actors, over the job (launch.max_restarts), and
    // the wait before the k-th relaunch of one slot: restart_backoff_s * 2^k, at most 30 s.
    int64_t max_restarts = 0;
    double restart_backoff_s = 1;
  };

  // `launcher` may be null when every actor is external. Not owned; all must
  // outlive the controller. `stop` (may be null) is set by signal handlers.
  Controller(Options options, ServerTransport* transport, const Clock* clock,
             ProcessLauncher* launcher, const std::atomic<int>* stop);

  // Declares the actors of a role. Call before Launch/WaitForActors. A `recoverable` role's
  // loss (exit, missed heartbeats, overdue work) does not stop the job: the actor is declared
  // dead (and killed, if launched), its in-flight works come back lost (see AwaitNext), and its
  // slot is refilled: relaunched after a backoff while launch.max_restarts allows, or left
  // open for a rejoin when external. The loop must deal lost work again.
  void ExpectRole(const std::string& role, int count, bool external, bool recoverable = false);
  // Makes an expected recoverable role elastic: up to `max_count` actors in all, the slots
  // beyond its count filled by whoever joins (`rlforge actor --role R --connect ADDR`, no
  // rank or a rank beyond the count), and every actor of the role may leave (SIGTERM: Leave,
  // its work handed back, no fault, no relaunch; its slot stays open to a join).
  void AllowJoins(const std::string& role, int max_count);
  // Starts every non-external actor with `make_spec(actor)` (local backend).
  absl::Status LaunchAll(const std::function<ProcessSpec(const ActorInfo&)>& make_spec);
  // Starts a helper process that is not an actor (a sim_bridge server); Shutdown terminates
  // it first. Without an `owner` its exit stops the job like an actor's. With one (the
  // recoverable actor that uses it) a lost service is started again at once, as `role` under
  // launch.max_restarts, and its owner is lost with it: the owner's replacement connects to
  // the new service from scratch.
  absl::Status LaunchService(const ProcessSpec& spec, const std::string& owner = "",
                             const std::string& role = "");

  // For a store started after the controller (as a service): call before WaitForActors.
  void set_trainer_store_address(std::string address) {
    options_.trainer_store_address = std::move(address);
    awaiting_store_ = false;
  }
  // The store is starting: trainer ranks and engines that register meanwhile (they join by
  // address at any time) go unanswered, and their Register retry gets the store's address.
  void set_awaiting_trainer_store() { awaiting_store_ = true; }

  // Serves until every expected actor has registered. Fails at once when the trainer role has
  // several ranks and no store address to meet at.
  absl::Status WaitForActors();

  // Sends one unit of work; returns its work id. A recoverable actor whose connection is
  // already gone (killed, its exit not reaped yet) is lost here like any other way: the work
  // is returned lost by AwaitNext, as if it had been in flight.
  absl::StatusOr<uint64_t> Submit(const std::string& actor_id, proto::WorkRequest request,
                                  std::vector<TensorFrame> tensors = {});
  // Serves until these works have results (in the given order), or fails with
  // the reason the job must stop (an actor died, work failed or timed out, a stop signal).
  // A failed work fails the call as soon as its result arrives, without waiting for the
  // others (a rank that failed leaves its peers waiting in a collective); the call then gives
  // up on all of `work_ids`.
  absl::StatusOr<std::vector<WorkOutcome>> AwaitAll(const std::vector<uint64_t>& work_ids);
  absl::StatusOr<WorkOutcome> Await(uint64_t work_id);
  // Serves until one of `work_ids` has a result and returns it with its index in `work_ids`
  // (the earliest such index when several are done); the others stay pending. A failed work
  // fails the call as AwaitAll does, giving up on all of `work_ids`.
  absl::StatusOr<std::pair<size_t, WorkOutcome>> AwaitAny(const std::vector<uint64_t>& work_ids);
  // AwaitAny for a loop that re-deals lost work: a work whose actor was lost is returned too,
  // with `lost` set, instead of failing the call.
  absl::StatusOr<std::pair<size_t, WorkOutcome>> AwaitNext(const std::vector<uint64_t>& work_ids);
  // AwaitAll for works that may be lost: every outcome, in the order of `work_ids`, a lost one
  // with `lost` set; a failed work fails the call as AwaitAll does.
  absl::StatusOr<std::vector<WorkOutcome>> AwaitEach(const std::vector<uint64_t>& work_ids);
  // Serves until `role` has at least `min_live` live actors, saying so in the log and the
  // status sink while it waits. Fails when too few can come (no slot pending, relaunching or
  // open to a join), or after controller.register_timeout_s plus the largest backoff.
  // `min_key` (e.g. "reward.min_workers"), when not empty, is named in the messages.
  absl::Status AwaitLive(const std::string& role, int min_live = 1,
                         const std::string& min_key = "");
  // Serves until one of `work_ids` has a result (ok or not) and returns its index, leaving every
  // result pending: its owner collects it (Await, AwaitAll), and a failure surfaces there.
  absl::StatusOr<size_t> AwaitReady(const std::vector<uint64_t>& work_ids);

  // One round of serving: waits up to timeout_ms for input, handles all of it,
  // then checks health. Non-OK means the job must stop.
  absl::Status Pump(int timeout_ms);
  // Cancelled ("interrupted by signal N") once the stop flag is set; OK before.
  absl::Status Stopped() const;

  // Asks every live actor to exit, waits up to shutdown_grace_s, then
  // terminates and finally kills what remains. Leaves no child running.
  void Shutdown(const std::string& reason);

  // Whether the job stopped because a worker failed its set-up on the job's config (it reported
  // SetupFailed, or a launched process exited with kConfigErrorExit): nothing is retried, and
  // `rlforge run` exits 2 as for a job file it refuses.
  bool stopped_on_config() const { return !config_failure_.ok(); }

  const ActorRegistry& actors() const { return registry_; }
  const DropStats& drops() const { return drops_; }
  const FaultStats& faults() const { return faults_; }
  const ElasticStats& elastic() const { return elastic_; }
  // Called with ("waiting", why) when a loop starts waiting for live actors (AwaitLive), and
  // with ("running", "") when the wait is over.
  void set_status_sink(std::function<void(const std::string&, const std::string&)> sink) {
    status_sink_ = std::move(sink);
  }
  // Called for every FaultEvent, as it happens.
  void set_fault_sink(std::function<void(const FaultEvent&)> sink) {
    fault_sink_ = std::move(sink);
  }
  std::string endpoint() const { return transport_->endpoint(); }
  // Where actors on other hosts join (Options::join_address, else endpoint()).
  std::string join_address() const {
    return options_.join_address.empty() ? endpoint() : options_.join_address;
  }
  // Called for every Metrics message an actor sends.
  void set_metrics_sink(std::function<void(const std::string&, const proto::Metrics&)> sink) {
    metrics_sink_ = std::move(sink);
  }
  // Called on the loop thread after every Pump (at most every poll_ms while
  // waiting), so observers such as the dashboard can copy the registry.
  void set_pump_observer(std::function<void()> observer) { pump_observer_ = std::move(observer); }

 private:
  struct Pending {
    std::string actor_id;
    int64_t submitted_us = 0;
    bool done = false;
    WorkOutcome outcome;
  };

  void Handle(Received r);
  void HandleRegister(const std::string& peer, const proto::Envelope& env);
  void HandleResult(ActorInfo& actor, Message msg);
  // Tracks and logs an actor's set-up (heartbeats in state SETTING_UP, with their phase).
  void NoteSetup(ActorInfo& actor, const proto::Heartbeat& heartbeat);
  // The actor's set-up is over (a heartbeat out of SETTING_UP, or a result): logs how long.
  void EndSetup(ActorInfo& actor);
  // An elastic role's actor leaving (Leave): its works handed back, its slot left open.
  void HandleLeave(ActorInfo& actor, const std::string& peer, const std::string& reason);
  // A worker whose role could not be set up from the job's config (SetupFailed): the job stops
  // naming it and `error`, and the worker is told so (Shutdown).
  void HandleSetupFailed(ActorInfo& actor, const std::string& peer, const std::string& error);
  // Records that `actor` cannot work with the job's config (`what`) and returns the status that
  // stops the job; never a fault, so never retried.
  absl::Status ConfigFailure(ActorInfo& actor, const std::string& what, bool with_log_tail);
  // Ends every pending work of `actor` as lost (`left`: handed back on purpose) with `why`;
  // returns how many.
  int64_t GiveBackWorks(const ActorInfo& actor, const std::string& why, bool left);
  void Reject(const std::string& peer, const std::string& reason);
  // `rlforge actor ...` that fills `a`'s slot from another host.
  std::string JoinCommand(const ActorInfo& a) const;
  absl::Status CheckHealth();
  // `failed` (one of several works awaited together), or the loss of an actor noticed
  // within the next second, which is the likelier cause.
  absl::Status CauseOf(const absl::Status& failed);
  absl::Status ActorLost(const ActorInfo& actor, const std::string& what);
  // ActorLost for an actor that stops the job; Recover (and OK) for a recoverable one.
  absl::Status Lose(ActorInfo& actor, const std::string& what);
  // Declares a recoverable actor dead, gives back its works and schedules its replacement.
  void Recover(ActorInfo& actor, const std::string& what);
  // Relaunches the slots whose backoff is over.
  absl::Status RestartDue();
  void Emit(FaultEvent event);
  absl::StatusOr<std::pair<size_t, WorkOutcome>> AwaitFirst(const std::vector<uint64_t>& work_ids,
                                                            bool give_back_lost);
  Message NewMessage() const;

  Options options_;
  ServerTransport* transport_;
  const Clock* clock_;
  ProcessLauncher* launcher_;
  const std::atomic<int>* stop_;
  ActorRegistry registry_;
  std::map<uint64_t, Pending> pending_;
  struct Service {
    std::string name;
    std::string log_path;
    std::string owner;  // "" when its loss stops the job
    std::string role;   // its restarts count against launch.max_restarts for this role
    ProcessSpec spec;   // to start it again
  };
  // A service's exit: relaunched with its owner lost (OK), or the error that stops the job.
  absl::Status ServiceLost(Service service, const ProcessExit& exit);
  std::map<int, Service> services_;  // by pid
  uint64_t next_work_id_ = 1;
  DropStats drops_;
  FaultStats faults_;
  ElasticStats elastic_;
  std::map<int, std::string> left_pids_;  // launched processes that left, by pid: their exit
  std::map<std::string, int64_t> restarts_by_role_;
  std::function<ProcessSpec(const ActorInfo&)> make_spec_;  // from LaunchAll, for relaunches
  std::function<void(const FaultEvent&)> fault_sink_;
  bool shutting_down_ = false;
  absl::Status config_failure_;  // set once, by ConfigFailure; every later Pump returns it
  bool awaiting_store_ = false;
  std::function<void(const std::string&, const proto::Metrics&)> metrics_sink_;
  std::function<void()> pump_observer_;
  std::function<void(const std::string&, const std::string&)> status_sink_;
};

}  // namespace rlforge
