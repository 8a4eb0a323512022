#include "config/lm_weights_config.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "config/build_info.h"
#include "config/device.h"

namespace rlforge {

namespace {

// weights.apply: mapped serves the engines' fp32 parameters from a segment on the trainer's host.
void CheckMappedWeights(const JobConfig& c, config::CheckContext& ctx) {
  if (c.weights.apply != WeightApply::kMapped) return;
  if (c.weights.dtype != FloatDtype::kFloat32) {
    ctx.Error(
        "weights.dtype",
        absl::StrCat("weights.apply mapped serves the engines' fp32 parameters from the "
                     "stream's own bytes; got ",
                     ChoiceName(c.weights.dtype), " (use float32, or weights.apply in_place)"));
  }
  const std::string transport = LmWeightTransport(c);
  if (transport != "shm") {
    ctx.Error("weights.transport",
              absl::StrCat("weights.apply mapped needs the engines on the trainer's host, through "
                           "shared memory (shm); this job's transport is ",
                           transport, " (set weights.transport: shm, or another weights.apply)"));
  }
  if (c.engine.device != "cpu") {
    ctx.Error("weights.apply",
              absl::StrCat("mapped makes the shared-memory stream the engines' own parameters, "
                           "which a GPU cannot compute on; engine.device is ",
                           c.engine.device, " (use weights.apply in_place or staged)"));
  }
}

// weights.transport cuda_ipc and nccl move device memory: both ends on a GPU, a build whose
// libtorch has CUDA, and (cuda_ipc) the engines on the trainer's host.
void CheckDeviceWeights(const JobConfig& c, config::CheckContext& ctx) {
  const std::string t = LmWeightTransport(c);
  if (!IsDeviceWeightTransport(t)) return;
  const std::string why = t + " moves GPU memory";
  if (!RLFORGE_TORCH_CUDA && c.weights.transport == t) {
    ctx.Error("weights.transport", absl::StrCat(t,
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
  if (t == "cuda_ipc" && (c.rollout.external || UnderSlurm(c.launch))) {
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

void CheckLmWeights(const JobConfig& c, config::CheckContext& ctx) {
  if (c.job.algorithm == nullptr || !c.job.algorithm->lm_engines) return;
  CheckMappedWeights(c, ctx);
  CheckDeviceWeights(c, ctx);
}

std::string LmWeightTransport(const JobConfig& c) {
  if (c.weights.transport != "auto") return c.weights.transport;
  // Engines that may join (from any host) and leave at any moment: inline weights, which
  // reach every engine from the controller, and which an engine leaving mid-load cannot cut
  // short as it would a stream.
  const bool joins = c.rollout.max_staleness == 0 && c.rollout.max_workers > c.rollout.workers;
  const bool other_hosts = c.rollout.external || UnderSlurm(c.launch);
  if (OnCuda(c.trainer.device) && OnCuda(c.engine.device) && !joins) {
    return other_hosts ? "nccl" : "cuda_ipc";
  }
  if (c.rollout.external) return "gloo";
  return UnderSlurm(c.launch) || joins ? "zmq" : "shm";
}

}  // namespace rlforge
