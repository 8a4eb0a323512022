// LoRA: low-rank adapters on a Transformer's projections, saved and loaded in PEFT's format.
//
// base model + LoraSpec -> AddLora (lora_A kaiming-uniform, lora_B zeros, as peft) ->
//   forward y = W x + (alpha / rank) B A dropout(x) -> SavePeftAdapter (adapter_config.json +
//   adapter_model.safetensors) -> LoadPeftAdapter, or MergeAdapters (W += s B A) for an
//   ordinary checkpoint.
//
// Adapter parameters are registered under their projection as lora_A.weight [rank, in] and
// lora_B.weight [out, rank], so their names are PEFT's without its "base_model.model." prefix
// (model.layers.3.self_attn.q_proj.lora_A.weight). Nothing else of the model changes; the
// caller freezes the base (FreezeBase). Not thread-safe; the model's owner calls these.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "config/job_config.h"
#include "models/transformer.h"

namespace rlforge::models {

struct LoraSpec {
  int64_t rank = 0;
  double alpha = 16;
  double dropout = 0;
  std::vector<std::string> target_modules;  // projection names: q_proj, ..., down_proj
  double scale() const { return alpha / static_cast<double>(rank); }
};

// The projections a LoRA may target (Llama / Qwen2 / Qwen3 decoders).
const std::vector<std::string>& LoraTargetModules();

// trainer.lora's values.
LoraSpec LoraSpecOf(const LoraOptions& options);

// Adds an adapter to every target projection of every layer. Fails naming the module when a
// target is unknown, the rank is not positive, or the model has adapters already. Without
// `in_forward` the adapters are registered (named, streamed, loaded) but the forward ignores
// them: MergedLora folds them into the weights instead.
absl::Status AddLora(Transformer& model, const LoraSpec& spec, bool in_forward = true);

bool IsLoraParameter(const std::string& name);  // ".lora_A." or ".lora_B." in it

// requires_grad false on every parameter but the adapters'.
void FreezeBase(Transformer& model);

// The adapters' parameters by name (the module's names), in module order.
std::vector<std::pair<std::string, torch::Tensor>> LoraParameters(const Transformer& model);

// PEFT's tensor name for one of ours: "base_model.model." + name.
std::string PeftTensorName(const std::string& name);

// Writes dir/adapter_config.json and dir/adapter_model.safetensors (fp32) as peft's
// save_pretrained does; `base_model` goes into base_model_name_or_path.
absl::Status SavePeftAdapter(const Transformer& model, const LoraSpec& spec,
                             const std::string& base_model, const std::string& dir);

// Reads dir/adapter_config.json (file and key named on an error; only what this LoRA
// implements is accepted: peft_type LORA, no bias, no DoRA / rsLoRA / fan_in_fan_out).
absl::StatusOr<LoraSpec> ReadPeftConfig(const std::string& dir);

// Adds the adapter in `dir` to `model` (AddLora) and loads its tensors; every tensor the
// config implies must be present with its shape, and no other.
absl::StatusOr<LoraSpec> LoadPeftAdapter(Transformer& model, const std::string& dir);

// W += scale * B A for each adapter of `adapters` (as LoraParameters names them) into the
// matching projection of `model`, which has none of its own: the merged ordinary model.
absl::Status MergeAdapters(Transformer& model,
                           const std::vector<std::pair<std::string, torch::Tensor>>& adapters,
                           double scale);

// `rlforge merge-lora`: the PEFT adapter in `adapter_dir` merged into the HF checkpoint
// `base_dir` (empty: the adapter's base_model_name_or_path), written as an ordinary HF
// checkpoint (fp32 weights, config.json) into `out_dir`, which must not exist; on failure
// nothing is left there. Returns the base directory used (the caller copies its tokenizer).
absl::StatusOr<std::string> MergeLoraCheckpoint(const std::string& adapter_dir,
                                                const std::string& base_dir,
                                                const std::string& out_dir);

// An engine's LoRA, served merged: the adapters are registered out of the forward (their
// parameters are the weight stream's destinations) and Merge() sets W = W0 + scale B A for
// each adapted weight from a kept copy W0, so versions never accumulate rounding.
class MergedLora {
 public:
  static absl::StatusOr<std::unique_ptr<MergedLora>> Create(Transformer& model,
                                                            const LoraSpec& spec);
  // After new adapter values were written into the model's lora parameters.
  void Merge();
  int64_t adapter_elements() const { return adapter_elements_; }

 private:
  struct Target {
    torch::Tensor weight, base, a, b;
  };
  std::vector<Target> targets_;
  double scale_ = 0;
  int64_t adapter_elements_ = 0;
};

}  // namespace rlforge::models
