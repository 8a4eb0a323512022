// Algorithm: the training loop a job runs on top of the controller.
//
// Roles() -> controller launches and registers actors -> Run(ctx) drives them,
// one iteration at a time, reporting each through ctx.EndIteration.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "config/job_config.h"
#include "controller/controller.h"
#include "controller/job_checkpoint.h"
#include "controller/run_directory.h"
#include "dashboard/run_state.h"

namespace rlforge {

struct RoleRequirement {
  std::string role;
  int count = 0;
  bool external = false;
  // The loop re-deals the work of a lost actor of this role (Controller::ExpectRole).
  bool recoverable = false;
  // Actors may join (up to max_count in all) and leave (SIGTERM) at any time
  // (Controller::AllowJoins); needs `recoverable`.
  bool elastic = false;
  int max_count = 0;
};

// What one iteration measured. Everything that depends on wall-clock time goes
// in `timings` (seconds per stage, throughputs), so the rest of a record is
// reproducible for a fixed seed.
struct IterationRecord {
  int64_t step = 0;
  std::map<std::string, double> timings;
  std::map<std::string, double> metrics;
};

// One generated sample of a language job, for the dashboard's recent-samples table.
using SampleRecord = dashboard::SampleRow;

class JobContext {
 public:
  virtual ~JobContext() = default;
  virtual Controller& controller() = 0;
  virtual const JobConfig& config() const = 0;
  virtual const RunDirectory& run_dir() const = 0;
  // Appends to metrics.jsonl and prints the progress line.
  virtual absl::Status EndIteration(const IterationRecord& record) = 0;
  // For progress and ETA, when the algorithm derives its length (default job.iterations).
  virtual void SetTotalIterations(int64_t total) = 0;
  // Recent samples shown by the dashboard (bounded by dashboard.max_samples).
  virtual void AddSamples(const std::vector<SampleRecord>& samples) {}
  // The checkpoint a resumed job continues from (`rlforge run --resume`), or null: the loop
  // restores its actors and counters from it and starts at iteration step + 1.
  virtual const JobCheckpoint* resume_point() const { return nullptr; }
  // With checkpoint.every set, the signal (SIGINT, SIGTERM) that asked the job to checkpoint
  // and stop once the iteration under way ends; 0 when none came (CheckpointAfterIteration).
  virtual int StopSignal() const { return 0; }
};

class Algorithm {
 public:
  virtual ~Algorithm() = default;
  virtual std::vector<RoleRequirement> Roles() const = 0;
  virtual absl::Status Run(JobContext& ctx) = 0;
};

// The loop of config.job.algorithm's family (config/algorithm_registry.h).
absl::StatusOr<std::unique_ptr<Algorithm>> CreateAlgorithm(const JobConfig& config);
// The roles `config`'s algorithm needs, without the checks CreateAlgorithm makes of this host
// (its starting checkpoint): what a job run elsewhere (Kubernetes) will expect.
std::vector<RoleRequirement> AlgorithmRoles(const JobConfig& config);

// The id of trainer rank 0, for a loop whose trainer has one rank (control ppo). A loop whose
// trainer shards over trainer.ranks sends every request to all of them (TrainerGroup).
absl::StatusOr<std::string> LeadTrainer(const Controller& controller);

}  // namespace rlforge
