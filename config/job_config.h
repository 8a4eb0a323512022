// The job file's keys: every section rlforge understands, as typed structs.
//
// Defaults live here, as initial values; JobSchema() documents and validates
// them, and docs/config.md is generated from it (`rlforge config-docs`).
// Adding a key: add the member, then one line in the section's schema (config/*_config.cc).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "config/algorithm_registry.h"
#include "config/choices.h"
#include "config/control_options.h"
#include "config/dashboard_options.h"
#include "config/engine_options.h"
#include "config/grpo_options.h"
#include "config/lm_options.h"
#include "config/loader.h"
#include "config/reward_options.h"
#include "config/schema.h"

namespace rlforge {

struct JobOptions {
  std::string name;                          // default: the job file's name without .yaml
  const AlgorithmSpec* algorithm = nullptr;  // set by loading (a required key)
  int64_t seed = 1;
  int64_t iterations = 10;
  std::string run_root = "runs";
  LogLevel log_level = LogLevel::kInfo;
};

struct ControllerOptions {
  std::string host = "127.0.0.1";
  int64_t port = 0;
  int64_t store_port = 0;      // the trainer ranks' rendezvous store; 0: any free port
  std::string advertise_host;  // how other hosts reach this one; "": controller.host, or the
                               // host name when that is a wildcard (docs/multi_host.md)
  // auto: CURVE exactly when `host` is not loopback; curve; none (plaintext, a loud warning
  // off loopback). Resolved at job start (controller/job_keys.h).
  Security security = Security::kAuto;
  // A folder with controller.key and actor.key to use instead of new keys in runs/NAME/keys/
  // (Kubernetes: the mounted Secret that `rlforge k8s` writes).
  std::string keys;
  // 2.5 s of silence declares an actor dead: within 3 s of the fault (docs/fault_tolerance.md).
  int64_t heartbeat_interval_ms = 500;
  int64_t heartbeat_misses = 5;
  int64_t max_message_mb = 1024;
  double register_timeout_s = 60;
  double request_timeout_s = 600;
  // From registration to a built role (a checkpoint loaded): its own deadline, apart from
  // heartbeat silence (the heartbeats flow during set-up).
  double setup_timeout_s = 600;
  double shutdown_grace_s = 5;
};

// The learner's optimisation settings, shared by every algorithm that trains.
// Low-rank adapters (trainer.lora; docs/lora.md): W x + (alpha / rank) B A dropout(x) on each
// target module, A [rank, in], B [out, rank]; the base weights stay frozen. rank 0: off.
struct LoraOptions {
  int64_t rank = 0;
  double alpha = 16;
  double dropout = 0;
  std::vector<std::string> target_modules = {"q_proj", "k_proj", "v_proj", "o_proj"};
};

struct TrainerOptions {
  int64_t ranks = 1;
  int64_t threads = 0;  // intra-op threads per rank; 0: cores / ranks
  double collective_timeout_s = 60;
  double lr = 3e-4;
  LrSchedule lr_schedule = LrSchedule::kConstant;
  int64_t warmup_steps = 0;
  double min_lr_ratio = 0.0;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_eps = 1e-8;
  double weight_decay = 0.0;
  double max_grad_norm = 1.0;
  // Sharded training (trainer.ranks > 1): free a layer's gathered parameters after its
  // forward (ZeRO-3) or keep them until its backward; bf16 compute with fp32 master weights.
  bool reshard_after_forward = true;
  MixedPrecision mixed_precision = MixedPrecision::kNone;
  std::string device = "cpu";            // "cpu" | "cuda" | "cuda:N" (config/device.h)
  int64_t micro_batch_size = 0;  // LM learners: sequences per forward/backward; 0: whole minibatch
  LoraOptions lora;
};

// Where one role's actors run under launch.backend slurm (docs/multi_host.md).
struct RolePlacementOptions {
  std::vector<int64_t> nodes;  // node indices of the allocation; empty: every node
  int64_t per_node = 0;        // most actors of the role on one node; 0: no limit
  int64_t gpus = 0;            // GPUs per actor (srun --gpus-per-task)
  bool operator==(const RolePlacementOptions& o) const {
    return nodes == o.nodes && per_node == o.per_node && gpus == o.gpus;
  }
};

struct PlacementOptions {
  RolePlacementOptions trainer;
  RolePlacementOptions rollout;
  RolePlacementOptions reward;
};

struct LaunchOptions {
  LaunchBackend backend = LaunchBackend::kLocal;  // UnderSlurm, EveryRoleJoins
  int64_t nodes = 0;              // slurm: nodes of the allocation used; 0: all (or as needed)
  PlacementOptions placement;
  int64_t max_restarts = 3;        // relaunches of a role's lost workers, over the job
  double restart_backoff_s = 1.0;  // before a slot's k-th relaunch: this * 2^k (at most 30 s)
  int64_t max_job_restarts = 0;    // whole-job restarts from the newest checkpoint
};

// Whole-job checkpoints (docs/checkpoints.md): runs/<name>/checkpoints/step_<N>/state/.
struct CheckpointOptions {
  int64_t every = 0;  // iterations between checkpoints; 0: none, and Ctrl-C stops at once
  int64_t keep = 3;   // complete checkpoints kept, the newest ones
};

// The transport self-test job: tensors go out to every echo actor and back.
struct EchoOptions {
  int64_t workers = 2;
  bool external = false;
  int64_t requests_per_iteration = 4;
  int64_t payload_bytes = 65536;
  int64_t tensors = 2;
  int64_t work_micros = 0;
};

struct JobConfig {
  JobOptions job;
  ControllerOptions controller;
  LaunchOptions launch;
  CheckpointOptions checkpoint;
  TrainerOptions trainer;
  EchoOptions echo;
  EnvOptions env;
  SimOptions sim;
  RolloutOptions rollout;
  PolicyOptions policy;
  PpoOptions ppo;
  WeightsOptions weights;
  EngineOptions engine;
  GrpoOptions grpo;
  CriticOptions critic;
  DpoJobOptions dpo;
  RewardOptions reward;
  DashboardOptions dashboard;
  ModelOptions model;
  DataOptions data;
  SftOptions sft;
};

// Whether actors run as Slurm job steps (launch.backend: slurm).
inline bool UnderSlurm(const LaunchOptions& l) { return l.backend == LaunchBackend::kSlurm; }

// A role's cap on workers, counting those that join by hand: `max_workers`, or `workers` when
// it is 0 (rollout.max_workers, reward.max_workers).
inline int64_t WorkerCap(int64_t workers, int64_t max_workers) {
  return max_workers > 0 ? max_workers : workers;
}

// launch.backend kubernetes: the controller starts no actor; every role, trainer ranks
// included, joins by address (`rlforge actor --role R --rank K --connect ADDR`).
inline bool EveryRoleJoins(const LaunchOptions& l) {
  return l.backend == LaunchBackend::kKubernetes;
}

// True when the job's control plane uses CURVE (controller.security, controller.host).
bool UsesCurve(const ControllerOptions& controller);

// The schema of JobConfig (built once).
const config::Schema& JobSchema();

struct LoadedJob {
  JobConfig config;
  std::vector<config::ConfigError> errors;
  // What loads but should change: a renamed section under its old name (grpo: -> lm_rl:).
  std::vector<config::ConfigError> warnings;
  bool ok() const { return errors.empty(); }
};

// A check of a loaded job that needs more than config/ knows: a reward's regex, the env
// registry, the files a path names on this host (cli/setup_checks.h). It reports through `ctx`,
// so every error names file, line and key as the schema's own do.
using JobCheck = std::function<void(const JobConfig& config, config::CheckContext& ctx)>;

// Loads and validates a job file with command-line overrides, then runs `checks`; fills
// job.name from the file name when the file leaves it empty.
LoadedJob LoadJobFile(const std::string& path, const std::vector<std::string>& overrides,
                      const std::vector<JobCheck>& checks = {});
// Loads a resolved config sent by the controller (no file on disk).
LoadedJob LoadJobText(const std::string& yaml_text, const std::string& origin);

// Every key, defaults filled in, as YAML.
std::string ResolvedYaml(const JobConfig& config);
// The generated key reference (the body of docs/config.md's reference part).
std::string ConfigReferenceMarkdown();

}  // namespace rlforge
