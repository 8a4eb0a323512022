// The controller's side of language-model jobs with rollout engines (the kLmRl and kDpo
// families): prompts in, scored samples out, and held-out evaluation.
//
// examples -> TaskText::Encode -> EngineFleet deal (whole groups, by outstanding tokens)
//   -> one LmGenerate per engine (groups stream back in chunks, engines in parallel)
//   -> the reward workers score each chunk as it arrives (chunks dealt round-robin over
//   reward.workers, overlapping generation) -> Scored {groups, rewards, per-reward sums},
//   reassembled in example order: the same batch whatever rollout.workers is
//
// Failure: an engine or reward worker lost mid-call (its actor dead) gives its work back: the
// groups it owed are dealt again to the engines serving the current version, a scoring request
// goes to another reward worker; each prompt's group enters the batch exactly once, with the
// same samples (its seed follows from its request id). A replacement engine loads the current
// weights before it is dealt work, on every transport: the trainer publishes the current
// version again, to the new engines only, under a publication number of its own (the shm ring
// tags buckets with it, so the stream is never confused with an earlier one's copy). Losing
// every engine at once is therefore a fault like any other.
//
// Dealing, scoring and fault re-dealing are RolloutDispatcher's (controller/rollout_dispatcher.h),
// which the synchronous round here and the asynchronous loop both drive; this class keeps the
// fleet's versions and brings engines to the current weights.
//
// Elastic workers (synchronous and asynchronous runs): an engine that joins a slot beyond
// rollout.workers is brought to the current version as a replacement is and dealt groups from
// then on; one that leaves (SIGTERM) hands back what it owed, dealt again as a lost engine's
// work but not counted as a fault. A batch is dealt only once rollout.min_workers engines and
// reward.min_workers reward workers are live (it waits, with a status, up to the controller's
// deadline).
//
// Not thread-safe: one algorithm's loop drives it. The controller does not load libtorch;
// everything here is token ids and text.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "config/job_config.h"
#include "controller/algorithm.h"
#include "controller/engine_fleet.h"
#include "controller/task_text.h"
#include "controller/trainer_group.h"
#include "nlohmann/json.hpp"
#include "proto/lm_groups.h"

namespace rlforge {

struct SamplingParams {
  int64_t n = 1;  // samples per prompt
  double temperature = 1.0;
  double top_p = 1.0;
  int64_t top_k = 0;
  int64_t max_tokens = 8;
  uint64_t seed = 0;
  int64_t stream_groups = 4;  // groups per streamed chunk
  static SamplingParams Greedy(int64_t max_tokens, uint64_t seed);
};

struct Scored {
  std::vector<LmGroup> groups;  // in example order
  std::vector<double> rewards;  // [G * n], total reward per sample
  std::vector<PromptExample> examples;
  // reward/<name>/sum and /sumsq (reward/total/... too), generated_tokens, engine_preemptions,
  // and per engine i of the fleet rollout/<i>/version (the version it serves) and
  // rollout/<i>/groups (dealt).
  std::map<std::string, double> metrics;
  // generate_s (the busiest engine's generation seconds: the fleet's generation time),
  // rollout/<i>/generate_s per engine, reward_s, rollout_wall_s.
  std::map<std::string, double> timings;
};

class LmLoop {
 public:
  // `ctx` and `text` must outlive the loop. The rollout workers registered now are the fleet.
  LmLoop(JobContext& ctx, const TaskText& text);

  // Generates p.n answers to each example on the engines serving the current version (the
  // examples dealt as whole groups) and scores them chunk by chunk on the reward workers. A
  // failed engine fails the call naming it; so does a sample a reward worker could not score
  // (naming the prompt and the worker). A lost engine's or reward worker's work is dealt again
  // (metrics faults/requeued_groups, faults/requeued_scores: the job's totals, from the
  // first such loss on).
  absl::StatusOr<Scored> GenerateAndScore(const std::vector<PromptExample>& examples,
                                          const SamplingParams& p);

  // Greedy answers to the held-out examples: heldout_accuracy (each answer judged by
  // reward::AnswerJudge(check), as `rlforge eval` judges), heldout_examples,
  // heldout_reward/<name>/mean|std into rec.metrics; eval_s into rec.timings.
  absl::Status Evaluate(int64_t max_tokens, uint64_t seed, AnswerCheck check, IterationRecord& rec);

  // Step 0 of metrics.jsonl: the starting policy's held-out evaluation.
  absl::Status EvaluateStart(int64_t max_tokens, uint64_t seed, AnswerCheck check);

  // Brings every rollout engine to the version the trainer's step announced (`announced`,
  // with its inline "weights" frame on the zmq path): inline, each engine loads the frame;
  // otherwise the trainer ranks get PublishWeights while every engine gets LoadWeights, and
  // the stream flows between them. Waits for all. From then on only engines that serve that
  // version generate; one whose ack reports an older version sits out (and is warned of). An
  // engine lost during an inline load, or during a stream through the shm ring, is skipped
  // (its replacement loads the version later); one lost during a gloo or nccl broadcast fails
  // the stream, and the job.
  // Into rec: rollout/<i>/weight_load_s, weight_read_s and weight_gbps (timings) per engine;
  // publish_s and weight_stream_bytes (the trainer's side) when streamed.
  absl::Status SyncWeights(TrainerGroup& trainer, const proto::WeightsReady& announced,
                           std::vector<TensorFrame> tensors, IterationRecord& rec);

  const EngineFleet& fleet() const { return fleet_; }
  JobContext& ctx() const { return ctx_; }
  const TaskText& text() const { return text_; }

  // The engines serving the required version, after marking lost ones and loading the current
  // weights onto replacements; waits for a replacement when no engine is live. Loading may
  // ask the trainer to publish, which it does only between its requests: while a trainer
  // request is in flight, new engines wait (not loaded, not returned) and, when none serves,
  // the result is empty rather than a wait (the caller deals its groups later).
  absl::StatusOr<std::vector<size_t>> CurrentEngines();
  // The engines live now that serve the required version, as last loaded (a replacement not
  // yet given the weights is not among them). Sends nothing: callable at any time.
  std::vector<size_t> ServingEngines() const;
  // Work dealt again after its actor was lost (groups, scoring requests), for the job's totals.
  void CountRequeued(int64_t groups, int64_t scores);
  // faults/requeued_groups and faults/requeued_scores (the job's totals) into `metrics`, from
  // the first such loss on.
  void AddRequeuedMetrics(std::map<std::string, double>& metrics) const;

 private:
  // The version of a lost engine: it serves nothing.
  static constexpr int64_t kLostVersion = -1;

  // Marks lost engines, and new incarnations (replacements, joiners) as serving version 0,
  // to be given the current weights (unloaded_).
  void MarkEngines();
  // MarkEngines, then loads the current weights onto the engines not given them yet (unless a
  // stream would need the trainer while it has a request in flight).
  absl::Status Refresh();
  // A live engine whose replacement Refresh has not seen yet.
  bool ReplacementArrived() const;
  bool Live(size_t engine) const;
  bool TrainerBusy() const;
  // Brings `loaders` to last_weights_ (rec: where to record per-engine figures; may be null).
  absl::Status LoadOnto(const std::vector<size_t>& loaders, IterationRecord* rec);
  // gloo: the group `loaders` meet trainer rank 0 in, named anew whenever they change (a gloo
  // group's members are fixed when it forms): so a replaced engine joins the next group.
  std::string WeightGroupFor(const std::vector<size_t>& loaders);

  JobContext& ctx_;
  const TaskText& text_;
  EngineFleet fleet_;
  std::vector<int> incarnation_;  // per engine, the registration last seen
  std::vector<bool> unloaded_;    // per engine: a new incarnation not given the weights yet
  int64_t publications_ = 0;      // streams asked of the trainer (PublishWeights.publication)
  // The latest weights, for replacement engines: the announcement, its inline frame (if any),
  // and the trainer that streams them.
  proto::WeightsReady last_weights_;
  std::vector<TensorFrame> last_frames_;
  std::vector<std::pair<std::string, int>> weight_group_members_;  // actor id, incarnation
  int64_t weight_group_epoch_ = 0;
  TrainerGroup* trainer_ = nullptr;
  // Work dealt again after its actor was lost, over the job.
  int64_t requeued_groups_ = 0, requeued_scores_ = 0;
};

// The actors a kLmRl or kDpo job starts: trainer.ranks trainers, rollout.workers rollout
// workers, reward.workers reward workers (each `external` as its section says).
std::vector<RoleRequirement> LmRoles(const JobConfig& c);

// Per-reward sums of each sample's reward (reward/<name>/sum|sumsq), and of each sample's
// total, the weighted sum of its rewards (reward/total/sum|sumsq; config/ reserves the name
// "total"), in the order given, so they do not depend on how scoring chunks arrived.
void AddRewardSums(const std::map<std::string, std::vector<double>>& by_reward,
                   const std::vector<double>& totals, std::map<std::string, double>& metrics);

// Per-reward and total mean and std (as `prefix`reward/<name>/mean|std and
// `prefix`reward/total/mean|std) from GenerateAndScore's sums.
void RewardStats(const Scored& s, double count, std::map<std::string, double>& metrics,
                 const std::string& prefix);

// Whole-job checkpoints of the loops that drive a language-model policy (kLmRl, kDpo): after
// iteration `it`, at policy `version`, when CheckpointAfterIteration says so, the trainer
// ranks' state (trainer/) and controller.json {iteration, policy_version}, plus
// {"rollout": rollout} when `rollout` is not null (an asynchronous run's groups in flight).
absl::Status CheckpointLmJob(JobContext& ctx, TrainerGroup& trainer, int64_t it, int64_t version,
                             const nlohmann::json& rollout = nullptr);

// A resumed job: the trainer ranks read their state from the checkpoint, the restored version
// is checked against controller.json's, and the engines load it. Returns that version.
absl::StatusOr<int64_t> ResumeLmJob(TrainerGroup& trainer, LmLoop& loop, const JobCheckpoint& from);

// Refuses a missing model.path before any actor starts: otherwise the trainer, the rollout
// worker and the controller race to report the same missing checkpoint, each in its words.
absl::Status CheckStartCheckpoint(const JobConfig& c);

}  // namespace rlforge
