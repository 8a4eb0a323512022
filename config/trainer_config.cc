#include "config/trainer_config.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/role_names.h"
#include "config/build_info.h"
#include "config/device.h"

namespace rlforge {

namespace {

using config::Schema;
using config::SchemaBuilder;

// Why the algorithm's trainer is fixed to one CPU rank whatever the trainer section says, or ""
// when it shards over trainer.ranks on trainer.device; `fixed_to` is "one rank" or "the CPU".
std::string FixedTrainerReason(const AlgorithmSpec& a, const char* fixed_to) {
  if (!a.Starts(kTrainerRole)) return "starts no trainer";
  if (a.Reads("sim")) return absl::StrCat("trains its control policy on ", fixed_to);
  return "";
}

// Ranks on GPUs form an NCCL group (dist/nccl_communicator.h), one GPU per rank.
void CheckGpuTrainerRanks(const JobConfig& c, config::CheckContext& ctx) {
  const std::string what = absl::StrCat("trainer.ranks ", c.trainer.ranks, " with trainer.device ",
                                        c.trainer.device, ": ");
  if (!RLFORGE_NCCL) {
    ctx.Error("trainer.device",
              absl::StrCat(what, "ranks on GPUs form an NCCL group, and this build has no NCCL (",
                           RLFORGE_TORCH_CUDA
                               ? "CMake found none beside the CUDA toolkit or the torch wheel"
                               : "it links Debian's CPU-only libtorch",
                           "); set trainer.ranks: 1 or trainer.device: cpu, or build with "
                           "-DRLFORGE_CUDA=ON against the torch wheel (docs/gpu.md)"));
    return;
  }
  const absl::StatusOr<DeviceSpec> d = ParseDevice(c.trainer.device);
  // NCCL refuses two ranks on one GPU; under the local backend every rank is on this host.
  if (d.ok() && d->index >= 0 && !UnderSlurm(c.launch) && !EveryRoleJoins(c.launch)) {
    ctx.Error("trainer.device",
              absl::StrCat(what, "every rank would be on GPU ", d->index,
                           " of this host, and NCCL needs a GPU per rank; set trainer.device: "
                           "cuda (rank r takes GPU r)"));
  }
}

std::shared_ptr<const Schema> LoraSection() {
  SchemaBuilder<LoraOptions> b(
      "Low-rank adapters (docs/lora.md): the base weights stay frozen; only A and B of each "
      "target module train and hold optimizer state. Language-model algorithms only.");
  b.Int("rank", &LoraOptions::rank, "Adapter rank r; 0 trains the full model.").Min(0).Max(4096);
  b.Double("alpha", &LoraOptions::alpha, "Scaling numerator: the update is (alpha / r) B A x.")
      .Min(0, false);
  b.Double("dropout", &LoraOptions::dropout, "Dropout on the adapter's input while training.")
      .Min(0)
      .Max(1, false);
  b.StringList("target_modules", &LoraOptions::target_modules,
               "Projections that get an adapter, in every layer: q_proj, k_proj, v_proj, o_proj, "
               "gate_proj, up_proj, down_proj.");
  b.Check([](const LoraOptions& l, config::CheckContext& ctx) {
    static const std::vector<std::string> kModules = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                      "gate_proj", "up_proj", "down_proj"};
    if (l.target_modules.empty()) ctx.Error("target_modules", "expected at least one module");
    for (const std::string& m : l.target_modules) {
      if (std::find(kModules.begin(), kModules.end(), m) == kModules.end()) {
        ctx.Error("target_modules", absl::StrCat("unknown module '", m, "'; expected one of ",
                                                 absl::StrJoin(kModules, ", ")));
      }
    }
  });
  return b.Build();
}

// trainer.lora: what this LoRA implements (docs/lora.md says why each is refused).
void CheckLora(const JobConfig& c, config::CheckContext& ctx) {
  if (c.trainer.lora.rank == 0) return;
  const AlgorithmSpec* a = c.job.algorithm;
  if (a != nullptr && !a->lm_engines && !a->Reads("sft")) {
    ctx.Error("trainer.lora.rank",
              absl::StrCat("LoRA trains language models; job.algorithm ", a->name, " is not one"));
    return;
  }
  if (c.model.path.empty()) {
    ctx.Error("trainer.lora.rank", "LoRA adapts a pretrained model: set model.path");
  }
  if (c.trainer.ranks != 1) {
    ctx.Error("trainer.ranks", absl::StrCat("LoRA trains on one rank (the adapters are small; "
                                            "the base is frozen), got ",
                                            c.trainer.ranks));
  }
  if (c.trainer.mixed_precision != MixedPrecision::kNone) {
    ctx.Error("trainer.mixed_precision", "LoRA trains in fp32: set mixed_precision: none");
  }
  if (a == nullptr || !a->lm_engines) return;
  if (c.weights.apply != WeightApply::kInPlace) {
    ctx.Error("weights.apply", absl::StrCat("LoRA engines merge each adapter version into their "
                                            "weights in place; got ",
                                            ChoiceName(c.weights.apply), " (use in_place)"));
  }
  if (c.weights.transport == WeightTransport::kCudaIpc ||
      c.weights.transport == WeightTransport::kNccl || c.engine.device != "cpu") {
    ctx.Error("engine.device",
              "LoRA weight sync merges adapters into CPU engines; GPU engines load full weights "
              "(set trainer.lora.rank: 0)");
  }
}

}  // namespace

std::shared_ptr<const Schema> TrainerSection() {
  SchemaBuilder<TrainerOptions> b("The learner: ranks, threads and the AdamW optimiser.");
  b.Int("ranks", &TrainerOptions::ranks,
        "Trainer processes, each holding a shard of the model and optimiser state; rank 0 "
        "leads (its reply carries the weights and metrics). Language-model jobs shard over "
        "them; ppo trains its control policy on 1.")
      .Min(1)
      .Max(64);
  b.Int("threads", &TrainerOptions::threads,
        "Intra-op threads per trainer rank; 0 divides this host's cores among the ranks.")
      .Min(0);
  b.Double("collective_timeout_s", &TrainerOptions::collective_timeout_s,
           "Deadline of every collective between trainer ranks and of their rendezvous; a rank "
           "that died or hangs fails its peers within it.")
      .Min(0, false);
  b.Double("lr", &TrainerOptions::lr, "Peak learning rate.").Min(0, false);
  b.Enum("lr_schedule", &TrainerOptions::lr_schedule,
         "Decay after warm-up: constant, linear to min_lr_ratio*lr, or cosine to it.");
  b.Int("warmup_steps", &TrainerOptions::warmup_steps, "Optimiser steps of linear warm-up.").Min(0);
  b.Double("min_lr_ratio", &TrainerOptions::min_lr_ratio,
           "Final learning rate as a fraction of lr (linear and cosine schedules).")
      .Min(0)
      .Max(1);
  b.Double("adam_beta1", &TrainerOptions::adam_beta1, "AdamW beta1.").Min(0).Max(1, false);
  b.Double("adam_beta2", &TrainerOptions::adam_beta2, "AdamW beta2.").Min(0).Max(1, false);
  b.Double("adam_eps", &TrainerOptions::adam_eps, "AdamW epsilon.").Min(0, false);
  b.Double("weight_decay", &TrainerOptions::weight_decay, "AdamW decoupled weight decay.").Min(0);
  b.Double("max_grad_norm", &TrainerOptions::max_grad_norm,
           "Clip the global gradient norm to this; 0 disables clipping.")
      .Min(0);
  b.Bool("reshard_after_forward", &TrainerOptions::reshard_after_forward,
         "With several ranks: free each layer's gathered parameters after its forward and "
         "gather them again for its backward (ZeRO-3, least memory), or keep them until its "
         "backward (one all-gather fewer per layer, a full model's parameters at the peak).");
  b.Enum("mixed_precision", &TrainerOptions::mixed_precision,
         "`bf16`: gather parameters and compute forward and backward in bfloat16, keeping "
         "fp32 master weights, optimizer state and gradient reduction. `none`: fp32 "
         "throughout (the CPU default).");
  b.String("device", &TrainerOptions::device,
           "Where language-model trainer ranks compute: cpu, cuda (rank r on its host's GPU r) "
           "or cuda:N. The policy, reference and critic, their gradients and AdamW state live "
           "there. Several ranks on GPUs form an NCCL group, one GPU per rank (a build against "
           "a CUDA libtorch; docs/gpu.md). ppo's control policy trains on the CPU.");
  b.Int("micro_batch_size", &TrainerOptions::micro_batch_size,
        "Language-model RL and DPO learners: the most sequences one forward/backward holds "
        "(whole groups, at least one); the minibatch's loss and gradient are the same, its "
        "memory that of one micro-batch, at the cost of one more forward. 0: one pass.")
      .Min(0);
  b.Section("lora", &TrainerOptions::lora, LoraSection());
  b.Check([](const TrainerOptions& t, config::CheckContext& ctx) { CheckDevice(t.device, ctx); });
  return b.Build();
}

void CheckTrainerPlacement(const JobConfig& c, config::CheckContext& ctx) {
  CheckLora(c, ctx);
  if (c.job.algorithm == nullptr) return;
  const AlgorithmSpec& a = *c.job.algorithm;
  if (c.trainer.ranks != 1) {
    const std::string why = FixedTrainerReason(a, "one rank");
    if (!why.empty()) {
      ctx.Error("trainer.ranks", absl::StrCat(a.name, " ", why, "; got ", c.trainer.ranks));
    }
  }
  if (c.trainer.device == "cpu") return;
  const std::string why = FixedTrainerReason(a, "the CPU");
  if (!why.empty()) {
    ctx.Error("trainer.device",
              absl::StrCat(a.name, " ", why, "; got ", c.trainer.device, " (remove it)"));
  } else if (c.trainer.ranks > 1) {
    CheckGpuTrainerRanks(c, ctx);
  }
}

}  // namespace rlforge
