#include "weights/weight_transport.h"

#include "absl/strings/str_cat.h"
#include "common/role_names.h"
#include "config/build_info.h"
#include "config/device.h"

namespace rlforge {

namespace {

// A job whose policy goes to simulator rollout workers (ppo), not to language-model engines.
bool IsControlJob(const JobConfig& c) {
  return c.job.algorithm != nullptr && c.job.algorithm->Starts(kRolloutRole) &&
         !c.job.algorithm->lm_engines;
}

bool IsLmJob(const JobConfig& c) { return c.job.algorithm != nullptr && c.job.algorithm->lm_engines; }

// weights.apply mapped: the engines serve from a segment on the trainer's host.
void CheckMappedTransport(const JobConfig& c, WeightTransport t, config::CheckContext& ctx) {
  if (c.weights.apply != WeightApply::kMapped || t == WeightTransport::kShm) return;
  ctx.Error("weights.transport",
            absl::StrCat("weights.apply mapped needs the engines on the trainer's host, through "
                         "shared memory (shm); this job's transport is ",
                         WeightTransportName(t),
                         " (set weights.transport: shm, or another weights.apply)"));
}

// cuda_ipc and nccl move device memory: both ends on a GPU, a build whose libtorch has CUDA,
// and (cuda_ipc) the engines on the trainer's host.
void CheckDeviceTransport(const JobConfig& c, WeightTransport t, config::CheckContext& ctx) {
  const std::string& name = WeightTransportName(t);
  const std::string why = name + " moves GPU memory";
  if (!RLFORGE_TORCH_CUDA && c.weights.transport == t) {
    ctx.Error("weights.transport", absl::StrCat(name,
                                                ": this build has a CPU-only libtorch (build with "
                                                "-DRLFORGE_CUDA=ON, or use shm, gloo or zmq)"));
  }
  for (const auto& [key, device] : {std::pair{"trainer.device", &c.trainer.device},
                                    std::pair{"engine.device", &c.engine.device}}) {
    if (!OnCuda(*device)) {
      ctx.Error("weights.transport",
                absl::StrCat(why, " from the trainer's GPU to the engines'; ", key, " is ", *device,
                             " (set it to cuda, or use shm, gloo or zmq)"));
    }
  }
  if (t == WeightTransport::kCudaIpc && (c.rollout.external || UnderSlurm(c.launch))) {
    ctx.Error("weights.transport",
              absl::StrCat("cuda_ipc maps the trainer's GPU memory, which only processes on its "
                           "host can; ",
                           c.rollout.external ? "rollout.external engines join from any host"
                                              : "launch.backend slurm runs engines on other nodes",
                           " (use nccl)"));
  }
  if (c.weights.apply == WeightApply::kMapped) {
    ctx.Error("weights.apply",
              absl::StrCat("mapped serves the engines from host shared memory; ", why,
                           " into the engines' own parameters (use in_place or staged)"));
  }
}

}  // namespace

WeightTransport ResolveWeightTransport(const JobConfig& c, const WeightPlaneFacts& facts) {
  if (c.weights.transport != WeightTransport::kAuto) return c.weights.transport;
  const bool may_join = c.rollout.max_workers > c.rollout.workers;
  if (IsControlJob(c)) {
    // Workers that join later may run on any host: they get the weights over ZeroMQ.
    return may_join || facts.worker_on_other_host ? WeightTransport::kZmq : WeightTransport::kShm;
  }
  // Engines that may join (from any host) and leave at any moment: inline weights, which
  // reach every engine from the controller, and which an engine leaving mid-load cannot cut
  // short as it would a stream.
  const bool joins = may_join;  // synchronous or asynchronous: both take joiners
  const bool other_hosts = c.rollout.external || UnderSlurm(c.launch);
  if (OnCuda(c.trainer.device) && OnCuda(c.engine.device) && !joins) {
    return other_hosts ? WeightTransport::kNccl : WeightTransport::kCudaIpc;
  }
  if (c.rollout.external) return WeightTransport::kGloo;
  return UnderSlurm(c.launch) || joins ? WeightTransport::kZmq : WeightTransport::kShm;
}

bool IsGroupWeightLocation(const std::string& location) {
  const std::optional<WeightTransport> t =
      ParseWeightTransport(std::string_view(location).substr(0, location.find(':')));
  return t.has_value() && IsGroupWeightTransport(*t);
}

void CheckWeightTransport(const JobConfig& c, config::CheckContext& ctx) {
  if (!IsLmJob(c)) return;
  const WeightTransport t = ResolveWeightTransport(c);
  CheckMappedTransport(c, t, ctx);
  if (IsDeviceWeightTransport(t)) CheckDeviceTransport(c, t, ctx);
}

}  // namespace rlforge
