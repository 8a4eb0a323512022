// LmRolloutRole: the rollout worker of language-model jobs (GRPO).
//
// LmGenerate (new prompts) -> LlmEngine (continuous batching) -> finished groups, returned
// in chunks of at least min_groups as they complete; LoadWeights -> shared memory -> the
// engine takes the new version between steps.
//
// The tokenizer and model come from model.path (a Hugging Face checkpoint, e.g. the SFT
// stage's output); the engine from the `engine:` section. Stop: the tokenizer's eos.
#pragma once

#include <memory>
#include <optional>

#include "actors/role.h"
#include "models/tokenizer.h"
#include "rollout/llm_engine.h"
#include "weights/weight_sync.h"

namespace rlforge {

class LmRolloutRole final : public Role {
 public:
  static absl::StatusOr<std::unique_ptr<Role>> Create(const JobConfig& config,
                                                      const proto::Assignment& assignment);
  absl::StatusOr<WorkReply> Handle(const proto::WorkRequest& request,
                                   std::vector<TensorFrame> tensors) override;
  int64_t policy_version() const override { return engine_->policy_version(); }

 private:
  LmRolloutRole() = default;
  absl::StatusOr<WorkReply> Generate(const proto::LmGenerate& task,
                                     const std::vector<TensorFrame>& tensors);
  absl::StatusOr<WorkReply> Load(const proto::LoadWeights& load,
                                 const std::vector<TensorFrame>& tensors);

  std::unique_ptr<models::Tokenizer> tokenizer_;
  std::unique_ptr<LlmEngine> engine_;
  std::vector<float> flat_;
  WeightReader reader_;
};

// Engine settings from the `engine:` section, the pool sized for `model`.
EngineSettings EngineSettingsFor(const EngineOptions& options,
                                 const models::TransformerConfig& model);

}  // namespace rlforge
