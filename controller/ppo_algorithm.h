// PpoAlgorithm: PPO for control policies in simulators, synchronous (rollout.max_staleness 0)
// or with rollout workers stepping up to k batches ahead of the trainer (PpoPipeline,
// controller/ppo_pipeline.cc; docs/async_rl.md "PPO on simulators").
//
// sim servers (optional) -> RolloutSetup (envs, seeds) -> TrainInit (v0) ->
// LoadWeights -> per iteration:
//   rollout workers: T steps each -> trajectories tagged with their version
//   controller: reward scaling (optional), GAE, batch of valid samples (ppo_batch.cc)
//   trainer: PPO update -> version v+1 -> weight sync (shm or ZeroMQ)
//   metrics: episodic_return over the last ppo.return_window episodes, losses,
//            per-stage timings, policy version and lag
#pragma once

#include <deque>
#include <map>

#include "common/cpu_affinity.h"
#include "controller/algorithm.h"
#include "trainer/running_stats.h"
#include "weights/weight_transport.h"

namespace rlforge {

class PpoAlgorithm final : public Algorithm {
  friend class PpoPipeline;

 public:
  explicit PpoAlgorithm(const JobConfig& config) : config_(config) {}
  std::vector<RoleRequirement> Roles() const override;
  absl::Status Run(JobContext& ctx) override;

 private:
  // Per rollout worker: sim servers as (name, endpoint).
  absl::StatusOr<std::vector<std::vector<std::pair<std::string, std::string>>>> StartSimServers(
      JobContext& ctx);
  // sim.cpu_affinity: where workers and the servers StartSimServers starts run.
  SimPlacement PlanPlacement() const;
  // Sends `w` to every ready worker and keeps it for replacements; a worker lost meanwhile
  // gets it once replaced.
  absl::Status Broadcast(Controller& c, const proto::WeightsReady& w,
                         std::vector<TensorFrame> inline_weights);
  // The RolloutSetup of worker slot `w`: its sim servers, env indices and seed.
  proto::WorkRequest SetupRequest(size_t w) const;
  // Readies a new registration in a slot, a replacement or a joiner: its envs are set up (a
  // lost worker's unfinished episodes are cut and counted as a fault, a leaver's as
  // elastic/episodes_cut) and it loads the current weights before any rollout.
  absl::Status PrepareReplacements(Controller& c);
  // The worker units of an iteration: rollout.workers, whatever the number of live slots.
  size_t Units() const { return static_cast<size_t>(config_.rollout.workers); }
  // One batch of T steps per unit (Units()), unit k dealt to slot k when it can take it, else
  // to any ready idle slot (joined slots included): outcomes by unit, the slot that produced
  // each, and each unit's rewards scaled as it arrives (in each slot's stepping order, before
  // a loss or leave seen later restarts that slot's normaliser episodes).
  absl::StatusOr<std::vector<WorkOutcome>> CollectRollouts(Controller& c, int64_t T,
                                                           std::vector<size_t>& producers,
                                                           std::vector<std::vector<float>>& scaled);
  bool Usable(const Controller& c, size_t w) const;
  // Submits the current weights (last_weights_, with copies of the inline frames) to slot w.
  absl::StatusOr<uint64_t> SubmitLoad(Controller& c, size_t w);

  // The loop's counters, restored by a resumed job.
  struct Progress {
    int64_t iteration = 0;  // last iteration done
    int64_t version = 0, env_steps = 0, episodes = 0;
    bool solved = false;
  };
  // Whole-job checkpoints: the counters, the return windows and the reward normalisers.
  nlohmann::json SaveProgress(const Progress& p) const;
  absl::Status RestoreProgress(const nlohmann::json& j, Progress* p);
  // Every stateful actor's SaveState (the trainer, each rollout worker) into state_dir.
  absl::Status SaveActors(Controller& c, const std::string& trainer, const std::string& state_dir);
  // A resumed job: counters from the checkpoint, the trainer's state (its version then
  // broadcast to the workers), each worker's sampler and envs.
  absl::Status Resume(Controller& c, const std::string& trainer, const JobCheckpoint& from,
                      Progress* p);

  // One iteration's training batch, assembled from worker batches (valid samples only).
  struct TrainBatch {
    std::vector<float> obs, logp, values, adv, ret, cact;
    std::vector<int64_t> dact;
    std::vector<int64_t> lag_rows;  // rows by lag (trained version - behaviour version)
    int64_t lag = 0;                // the largest lag
    double policy_s = 0, env_s = 0;
    std::map<size_t, int64_t> units_by_slot;  // worker units stepped, by slot (rollout/<k>/batches)
    int64_t rows() const { return static_cast<int64_t>(logp.size()); }
  };
  // The rewards of worker batch `o` as the loss sees them: scaled by the normaliser of the
  // worker slot that stepped them (ppo.normalize_reward), which must see each slot's batches
  // in stepping order.
  absl::StatusOr<std::vector<float>> ScaledRewards(const WorkOutcome& o, size_t producer);
  // GAE over worker batch `o` (rewards already scaled), its valid samples appended to `b`;
  // its episodes and env steps counted in `p`. `version`: the version `b` trains.
  // `producer`: the slot that stepped it (counted in b->units_by_slot).
  absl::Status AddRollout(const WorkOutcome& o, const std::vector<float>& rewards, size_t producer,
                          int64_t version, TrainBatch* b, Progress* p);
  // The train_step request of iteration `it` over `b`, collected by `behavior_version` (the
  // oldest version in it).
  absl::StatusOr<uint64_t> SubmitTrain(Controller& c, const std::string& trainer, int64_t it,
                                       int64_t iterations, int64_t behavior_version,
                                       const TrainBatch& b);
  // The record's metrics and timings of an iteration that trained `b` into `trained`.
  void RecordIteration(const WorkOutcome& trained, const TrainBatch& b, Progress* p,
                       IterationRecord* rec);
  // trainer_idle_share (of the iteration, the time no train step ran) and stepper_idle_share
  // (of workers x iteration seconds, those no rollout was in flight: `stepping_s` sums the
  // submit-to-result seconds of the rollouts returned during the iteration).
  void IdleShares(double train_s, double stepping_s, double iteration_s,
                  IterationRecord* rec) const;
  // Sets up the envs of every worker registered at the start (RolloutSetup) and checks that
  // they agree with each other and with env.num_envs; the policy spec they report.
  absl::StatusOr<proto::PolicySpec> SetUpWorkers(Controller& c);
  // weights.transport for this job (weights/weight_transport.h resolves auto, told whether a
  // registered worker reported another host than the trainer's).
  WeightTransport WeightsTransport(const Controller& c, const std::string& trainer) const;
  // One iteration of the synchronous loop: rollouts, batch, train step, weight sync, record,
  // checkpoint.
  absl::Status RunIteration(JobContext& ctx, const std::string& trainer, int64_t it,
                            int64_t iterations, Progress* p);
  // The loop of rollout.max_staleness k >= 1 (controller/ppo_pipeline.cc).
  absl::Status RunPipelined(JobContext& ctx, const std::string& trainer, int64_t iterations,
                            Progress* p);

  JobConfig config_;
  SimPlacement placement_;
  std::vector<std::string> workers_;  // every slot: configured, then elastic (joiners)
  std::vector<std::vector<std::pair<std::string, std::string>>> servers_;  // per worker slot
  proto::PolicySpec spec_;
  proto::WeightsReady last_weights_;
  std::vector<TensorFrame> last_frames_;  // the inline weights, when they travel inline
  std::vector<int> incarnation_;          // per slot: the registration set up last; -1: none
  std::vector<bool> left_;                // per slot: its actor left (SIGTERM) since set up
  std::vector<bool> ready_;               // per slot: set up and loaded for that registration
  std::vector<bool> stepped_;             // per slot: its envs ran since they were set up
  std::vector<int64_t> served_;           // per slot: the version it loaded last
  int64_t episodes_cut_ = 0, requeued_batches_ = 0;
  int64_t episodes_left_ = 0;  // unfinished episodes of workers that left (not a fault)
  size_t deal_offset_ = 0;     // CollectRollouts: the slot unit 0 is offered first
  std::vector<RewardScaler> reward_scalers_;
  std::deque<double> recent_returns_, recent_lengths_;
};

}  // namespace rlforge
