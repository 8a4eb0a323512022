#include "trainer/lora_policy.h"

#include "common/exceptions.h"
#include "common/status.h"
#include "models/hf_checkpoint.h"
#include "trainer/sharded_checkpoint.h"
#include "trainer/trainer_ranks.h"

namespace rlforge {

absl::StatusOr<std::unique_ptr<ShardedModel>> LoadPolicy(const JobConfig& config,
                                                         dist::Communicator* comm,
                                                         ShardedModel::Options options,
                                                         const SetupProgress& progress,
                                                         const std::string& what) {
  if (config.trainer.lora.rank == 0) {
    return LoadShardedModel(config.model.path, comm, options, /*value_head=*/false, progress, what);
  }
  return CallCatching([&]() -> absl::StatusOr<std::unique_ptr<ShardedModel>> {
    ASSIGN_OR_RETURN(models::Transformer model,
                     models::LoadHfModel(config.model.path, torch::kFloat32, progress));
    RETURN_IF_ERROR(models::AddLora(model, models::LoraSpecOf(config.trainer.lora)));
    options.frozen = [](const std::string& name) { return !models::IsLoraParameter(name); };
    return ShardedModel::Create(model, comm, options);
  });
}

absl::Status SavePolicy(const JobConfig& config, ShardedModel& policy, const std::string& dir) {
  const torch::Dtype dtype =
      config.model.dtype == FloatDtype::kBfloat16 ? torch::kBFloat16 : torch::kFloat32;
  if (config.trainer.lora.rank == 0) return SaveHfConsolidated(dir, policy, dtype);
  if (policy.comm().rank() != 0) return absl::OkStatus();
  return CallCatching([&]() -> absl::Status {
    const models::LoraSpec spec = models::LoraSpecOf(config.trainer.lora);
    RETURN_IF_ERROR(models::SavePeftAdapter(policy.module(), spec, config.model.path, dir));
    ASSIGN_OR_RETURN(models::Transformer merged, models::LoadHfModel(config.model.path));
    RETURN_IF_ERROR(
        models::MergeAdapters(merged, models::LoraParameters(policy.module()), spec.scale()));
    if (dtype != torch::kFloat32) merged->to(dtype);
    return models::SaveHfModel(merged, dir);
  });
}

}  // namespace rlforge
