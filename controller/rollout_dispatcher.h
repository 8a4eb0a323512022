// RolloutDispatcher: the one place where a language-model job's prompts become scored groups on
// the engine fleet, for the synchronous loop (rollout.max_staleness 0: one batch at a time, every
// reply made with the required version) and the asynchronous one (k >= 1: up to k + 1 batches in
// flight while the trainer trains). A second mode is a parameter, not a copy.
//
// batch b's examples + request ids -> Dispatch (whole groups dealt by tokens over the engines
//   serving the fleet's required version, queued per engine) -> one LmGenerate in flight per
//   engine (the groups queued since its last request, then chunks of finished groups) -> each
//   group routed to its batch by request id -> the reward workers score each chunk
//   (round-robin) -> Take(b): the batch's Scored, in example order
//
// Invariants: request ids are the caller's and unique among the batches in flight (each group's
// seed is RequestSeed of the sampling seed and its id, so its samples do not depend on the deal
// or on how batches interleave); an engine has at most one LmGenerate in flight, so its chunks
// come back in the order asked for; every group is owed by exactly one engine or waits for one
// (homeless) until it arrives, and enters its batch exactly once. Every wait is on work in
// flight (each has the controller's request deadline) or Controller::AwaitLive (its deadline).
//
// Failure and elastic workers (both modes): an engine lost (its work comes back lost, or it is
// not live when asked for more) gives back every group it owed; they are dealt again, same
// request ids, to the engines serving the required version (LmLoop::CurrentEngines, which gives
// replacements and joiners the current weights first), or wait homeless for Refill while the
// trainer is busy. An engine that left (SIGTERM) hands back what it owed the same way, but it is
// not counted as a fault; likewise a reward worker that left. A lost reward worker's chunk is
// sent to a live one (waiting for one if none is). Dispatch first waits for rollout.min_workers
// engines and reward.min_workers reward workers.
//
// Not thread-safe: one loop drives it. `loop` must outlive it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "controller/lm_loop.h"

namespace rlforge {

// A batch dispatched and not yet taken: what a checkpoint of an asynchronous run records, so
// that a resumed run deals it again with the same request ids.
struct InFlightBatch {
  int64_t batch = 0;
  std::vector<int64_t> request_ids;  // in example order
};

class RolloutDispatcher {
 public:
  // `p.seed` seeds every group (with its request id). max_staleness 0: each reply must be
  // made with the fleet's required version (EngineFleet::CheckReply).
  RolloutDispatcher(LmLoop& loop, SamplingParams p, int64_t max_staleness);

  // Deals batch `batch`'s groups (`request_ids[i]` for examples[i]). An error when the batch
  // was dispatched before, an id is in flight already, or the job has no reward worker.
  absl::Status Dispatch(int64_t batch, const std::vector<PromptExample>& examples,
                        const std::vector<int64_t>& request_ids);
  // Deals the homeless groups (given back when no engine could take them) to
  // LmLoop::CurrentEngines. Nothing to do when none is homeless.
  absl::Status Refill();
  // Serves the work until `done` holds; the trainer must be idle (homeless groups then wait
  // for a replacement engine). An error when nothing in flight could make it hold.
  absl::Status ServeUntil(const std::function<bool()>& done);
  // Serves the work (engines generate, reward workers score) until one of `others` (e.g. the
  // trainer's request) has a result, which its owner then collects.
  absl::Status ServeUntilReady(const std::vector<uint64_t>& others);

  // Every group of `batch` generated and scored.
  bool Complete(int64_t batch) const;
  // The complete batch, in example order; forgets it. metrics: reward sums, generated_tokens,
  // engine_preemptions, rollout/<i>/version and rollout/<i>/groups (of this batch) per engine
  // that ever registered; timings: rollout/<i>/generate_s, generate_s (the busiest engine's),
  // reward_s. A chunk's figures count toward the batch of its first group.
  absl::StatusOr<Scored> Take(int64_t batch);

  // Work in flight (generation and scoring), to wait on with Controller::AwaitReady.
  std::vector<uint64_t> Outstanding() const;
  // Collects outstanding work `work_id` (it must have arrived): routes its groups to their
  // batches and asks the engine for more, or records its scores. Work lost with its actor is
  // dealt again; any other failed work fails the call naming the actor.
  absl::Status Handle(uint64_t work_id);
  // Groups dispatched and not yet returned (owed by an engine or homeless).
  int64_t owed_groups() const;
  // Engine generation seconds (summed over engines) since the last call.
  double TakeEngineBusySeconds();
  // The batches dispatched and not taken, by batch.
  std::vector<InFlightBatch> InFlight() const;

 private:
  struct Batch {
    std::vector<PromptExample> examples;
    std::vector<int64_t> request_ids;
    std::vector<LmGroup> groups;
    std::vector<bool> arrived;
    std::vector<double> rewards;
    std::map<std::string, std::vector<double>> by_reward;
    size_t scored = 0;
    double tokens = 0, preemptions = 0, reward_s = 0;
    std::vector<double> engine_s;        // per engine: seconds generating its chunks
    std::vector<int64_t> engine_groups;  // per engine: its groups that arrived
  };
  struct Engine {
    std::vector<LmGroup> queued;  // dealt, not yet sent
    std::set<int64_t> owed;       // request ids sent or queued, not yet returned
    std::optional<uint64_t> work;
  };
  struct Scoring {
    std::string worker;
    std::vector<std::pair<int64_t, size_t>> groups;  // (batch, index)
    proto::ScoreTask task;                           // to send again if `worker` is lost
  };

  // The group of request `id` as an engine receives it (its prompt, no samples).
  LmGroup Prompt(int64_t id) const;
  // Deals groups `ids` by tokens over the engines serving now; with none they wait homeless.
  absl::Status Deal(const std::vector<int64_t>& ids);
  bool Live(const std::string& actor_id) const;
  absl::Status Request(size_t engine);
  absl::Status Generated(size_t engine, WorkOutcome o);
  // Routes a returned chunk's groups to their batches; the scoring request for them.
  absl::StatusOr<Scoring> Route(size_t engine, std::vector<LmGroup> chunk);
  // Deals what `engine` (lost, or left) owed again.
  absl::Status GiveBack(size_t engine);
  // Sends `s` to a live reward worker (round-robin).
  absl::Status Score(Scoring s);
  absl::Status OnScored(Scoring s, WorkOutcome o);
  absl::Status RecordScores(const Scoring& s, const WorkOutcome& o);

  LmLoop& loop_;
  Controller& ctl_;
  const EngineFleet& fleet_;
  SamplingParams p_;
  int64_t max_staleness_;
  std::vector<Engine> engines_;
  std::vector<int64_t> homeless_;  // request ids given back that no engine could take
  std::map<int64_t, Batch> batches_;
  std::map<int64_t, std::pair<int64_t, size_t>> where_;  // request id -> (batch, index)
  std::map<uint64_t, size_t> generating_;                // work id -> engine
  std::map<uint64_t, Scoring> scoring_;                  // work id -> what it scores
  size_t next_rewarder_ = 0;
  double busy_s_ = 0;
};

// AReaL's admission rule for a batch trained at policy version `version`: a group is admitted
// only if every token's version v satisfies version - k <= v <= version. Removes the other
// groups (and their rewards) and returns how many it removed. Also adds each admitted token's
// lag (version - v) to `lag_tokens` (index = lag, sized k + 1).
int64_t AdmitFresh(int64_t version, int64_t k, Scored& s, std::vector<double>& lag_tokens);

}  // namespace rlforge
