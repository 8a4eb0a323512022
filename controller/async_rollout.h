// AsyncRollout: the rollout side of asynchronous language-model RL (rollout.max_staleness
// k >= 1): several iterations' batches generate on the engine fleet at once, while the
// trainer trains.
//
// batch b's examples -> Dispatch (whole groups dealt by tokens over the engines serving the
//   fleet's required version, queued per engine) -> one LmGenerate in flight per engine (the
//   prompts queued since its last request, then chunks of finished groups) -> each group
//   routed to its batch by request id -> the reward workers score each chunk -> Take(b): the
//   batch's Scored, in example order
//
// Invariants: request ids are unique over the whole run (each group's seed is RequestSeed of
// the run's seed and its id, so a batch's samples do not depend on how batches interleave);
// an engine has at most one LmGenerate in flight, so chunks come back in the order asked for;
// every group is owed by exactly one engine or waits for one (homeless), until it arrives.
// Every wait is the caller's, through Controller::AwaitReady on Outstanding(): each work has
// the controller's request deadline. The throttle (which batch may be dispatched when) and
// the admission rule (AdmitFresh) are the caller's.
//
// Failure (as the synchronous LmLoop): an engine lost (its work comes back lost, or it is
// dead when asked for more) gives back every group it owed; they are dealt again, same
// request ids, to the engines serving the required version now (LmLoop::ServingEngines),
// which every batch still owed admits (it is at most the version a batch trains at, and at
// least the version the throttle dispatched it from), or wait homeless for Refill. A
// replacement is given the current weights (on the shm ring, a stream of its own) once the
// trainer is idle, since a stream needs the trainer: the only engine's loss included. A lost
// reward worker's chunk is sent to a live one (waiting for a replacement if none is).
//
// Not thread-safe: the LM RL loop owns it. `ctl`, `loop` and `text` must outlive it.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "controller/controller.h"
#include "controller/engine_fleet.h"
#include "controller/lm_loop.h"

namespace rlforge {

class AsyncRollout {
 public:
  // `p.seed` seeds every group of the run (with its request id).
  AsyncRollout(Controller& ctl, LmLoop& loop, const TaskText& text, std::string system_prompt,
               SamplingParams p);

  // Queues batch `batch`'s groups on the engines that serve the fleet's required version now
  // (LmLoop::CurrentEngines: replacements load the weights first when the trainer is idle;
  // while it trains, groups that no engine serving can take wait homeless for Refill). An
  // error when the live engines serve another version, or the batch was dispatched before.
  absl::Status Dispatch(int64_t batch, const std::vector<PromptExample>& examples);
  // Deals the groups a lost engine gave back that no engine could take (homeless) to
  // LmLoop::CurrentEngines (waiting for a replacement when none is live): the trainer must be
  // idle. Nothing to do when no group is homeless.
  absl::Status Refill();
  // Every group of `batch` generated and scored.
  bool Complete(int64_t batch) const;
  // The complete batch's groups, rewards and reward sums (reward/<name>/sum|sumsq,
  // reward/total/..., generated_tokens, engine_preemptions), in example order; forgets the batch.
  absl::StatusOr<Scored> Take(int64_t batch);

  // Work in flight (generation and scoring), to wait on with Controller::AwaitReady.
  std::vector<uint64_t> Outstanding() const;
  // Collects the result of outstanding work `work_id` (it must have arrived): routes its
  // groups to their batches and asks the engine for more, or records its scores. Work lost
  // with its actor is dealt again (faults/requeued_groups, faults/requeued_scores through
  // LmLoop::CountRequeued); any other failed work fails the call naming the actor.
  absl::Status Handle(uint64_t work_id);
  // Groups dispatched and not yet returned (owed by an engine or homeless).
  int64_t owed_groups() const;
  // Engine busy seconds (their generate_s, summed over engines) since the last call.
  double TakeEngineBusySeconds();

 private:
  struct Batch {
    std::vector<PromptExample> examples;
    std::vector<LmGroup> groups;
    std::vector<bool> arrived;
    std::vector<double> rewards;
    std::map<std::string, std::vector<double>> by_reward;
    size_t generated = 0, scored = 0;
    double tokens = 0, preemptions = 0;
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
  // Deals groups `ids` as whole groups by tokens over `engines` (those not live now left
  // out); with none left they wait homeless.
  absl::Status Deal(const std::vector<int64_t>& ids, std::vector<size_t> engines);
  bool Live(const std::string& actor_id) const;
  absl::Status Request(size_t engine);
  absl::Status Generated(size_t engine, WorkOutcome o);
  // Deals what lost `engine` owed again.
  absl::Status GiveBack(size_t engine);
  // Sends `s` to a live reward worker (round-robin).
  absl::Status Score(Scoring s);
  absl::Status RecordScores(const Scoring& s, WorkOutcome o);

  Controller& ctl_;
  LmLoop& loop_;
  const EngineFleet& fleet_;
  const TaskText& text_;
  std::string system_prompt_;
  SamplingParams p_;
  std::vector<Engine> engines_;
  std::vector<int64_t> homeless_;  // request ids given back that no engine could take
  std::map<int64_t, Batch> batches_;
  std::map<int64_t, std::pair<int64_t, size_t>> where_;  // request id -> (batch, index)
  std::map<uint64_t, size_t> generating_;                // work id -> engine
  std::map<uint64_t, Scoring> scoring_;                  // work id -> what it scores
  int64_t next_request_ = 0;
  size_t next_rewarder_ = 0;
  double busy_s_ = 0;
};

// AReaL's admission rule for a batch trained at policy version `version`: a group is admitted
// only if every token's version v satisfies version - k <= v <= version. Removes the other
// groups (and their rewards) and returns how many it removed. Also adds each admitted token's
// lag (version - v) to `lag_tokens` (index = lag, sized k + 1).
int64_t AdmitFresh(int64_t version, int64_t k, Scored& s, std::vector<double>& lag_tokens);

}  // namespace rlforge
