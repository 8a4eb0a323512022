// Which transport carries a job's weights: the one resolver of weights.transport auto, the
// transports' kinds, and the checks that need the resolved transport.
//
// config (WeightTransport, kAuto or chosen) + the job (algorithm, devices, hosts, workers that
// may join) [+ what the controller learns at run time: a worker on another host]
//   -> ResolveWeightTransport -> the publisher and reader (weights/policy_plane.h for control
//   policies; trainer/lm_policy_state.h and rollout/lm_rollout_role.h for language models)
//
// auto, language-model jobs (config only, so every actor resolves the same): with trainer and
// engines on cuda and no engine that may join, nccl where engines may be on other hosts
// (rollout.external, launch.backend slurm) and cuda_ipc on one host; otherwise gloo for external
// engines, zmq under Slurm or when engines may join (a leave cannot cut an inline load short),
// shm on one host. Control policies (PPO): zmq when a worker may join (from any host) or one
// reported another host than the trainer's, else shm.
#pragma once

#include "config/job_config.h"
#include "config/weight_transport.h"

namespace rlforge {

// What only the running job knows (the controller, once its workers registered).
struct WeightPlaneFacts {
  bool worker_on_other_host = false;  // a rollout worker reported another host than the trainer
};

// weights.transport for `c`: the chosen one, or auto resolved as the header says. Never kAuto.
WeightTransport ResolveWeightTransport(const JobConfig& c, const WeightPlaneFacts& facts = {});

// Transports whose bytes move in a broadcast group of trainer rank 0 and the loading engines
// (formed per load in the store; the location names the group).
inline bool IsGroupWeightTransport(WeightTransport t) {
  return t == WeightTransport::kGloo || t == WeightTransport::kNccl;
}
// Whether a WeightsReady's location ("gloo:<group>", "nccl:<group>", "shm-ring:/name", "inline",
// ...) names a group transport: what the publisher chose, which the controller follows.
bool IsGroupWeightLocation(const std::string& location);
// Transports whose bytes go from the trainer's GPU memory to the engines' (never the host's).
inline bool IsDeviceWeightTransport(WeightTransport t) {
  return t == WeightTransport::kCudaIpc || t == WeightTransport::kNccl;
}

// weights.bucket_mb in bytes, a multiple of 64 (the stream's bucket size, either kind of job).
inline uint64_t WeightBucketBytes(const WeightsOptions& w) {
  return static_cast<uint64_t>(w.bucket_mb * 1048576.0) / 64 * 64;
}

// A language-model job's resolved transport against the job: weights.apply mapped needs shm;
// cuda_ipc and nccl need both ends on a GPU, a CUDA build, and (cuda_ipc) one host. Errors name
// the key (a JobCheck: cli/setup_checks.h passes it to every load).
void CheckWeightTransport(const JobConfig& c, config::CheckContext& ctx);

}  // namespace rlforge
