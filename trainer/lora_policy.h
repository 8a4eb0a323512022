// The trained policy of a language-model learner, full or LoRA (trainer.lora, docs/lora.md).
//
// model.path -> LoadPolicy -> ShardedModel: every parameter trained (rank 0), or the base
//   frozen outside the units and only the adapters in them, so the optimizer (AdamW over the
//   shards), the weight stream, the job checkpoints and the gradient norm hold adapters only
// -> SavePolicy: an HF checkpoint; with LoRA also PEFT's adapter_config.json +
//   adapter_model.safetensors beside it, the checkpoint itself the merged model (so eval,
//   generate and other tools read it as any checkpoint).
// Collective: every trainer rank calls these in the same order. One thread per rank.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/setup_progress.h"
#include "config/job_config.h"
#include "dist/communicator.h"
#include "models/lora.h"
#include "trainer/sharded_model.h"

namespace rlforge {

// trainer.lora.rank > 0 loads model.path whole, adds the adapters (seeded by the caller's
// torch seed) and shards only them; else LoadShardedModel. `options` as ShardingOptions made.
absl::StatusOr<std::unique_ptr<ShardedModel>> LoadPolicy(const JobConfig& config,
                                                         dist::Communicator* comm,
                                                         ShardedModel::Options options,
                                                         const SetupProgress& progress,
                                                         const std::string& what);

// The policy as an HF checkpoint in `dir` (model.dtype); with LoRA the merged model plus the
// PEFT adapter files (base_model_name_or_path: model.path). Rank 0 writes.
absl::Status SavePolicy(const JobConfig& config, ShardedModel& policy, const std::string& dir);

}  // namespace rlforge
