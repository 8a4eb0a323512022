// RoPE frequencies of the Llama / Qwen families, computed as transformers computes them.
//
// config.json rope_scaling / rope_parameters -> RopeScaling (hf_config.cc)
//   -> inverse frequencies [head_dim / 2] fp32 and an attention factor that multiplies cos and
//      sin (so q.k by its square); Transformer builds its cos/sin tables from them.
//
// Types: default; linear (positions divided by factor); dynamic NTK (the base grows with the
// sequence length once it passes max_position_embeddings: the frequencies depend on the length,
// see DynamicNtkInverseFrequencies); yarn (interpolation blended with extrapolation by a ramp
// over the dimensions, plus an attention factor); llama3 (low frequencies divided by factor,
// high ones kept, a smooth blend between). Pure functions; any thread.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"

namespace rlforge::models {

enum class RopeType { kDefault, kLinear, kDynamic, kYarn, kLlama3 };

// transformers' name of a type ("default", "linear", "dynamic", "yarn", "llama3").
const char* RopeTypeName(RopeType type);

// The fields of rope_scaling / rope_parameters that a type reads; the others stay unset.
// Optional fields are kept as given so that config.json is written back as it was read.
struct RopeScaling {
  RopeType type = RopeType::kDefault;
  double factor = 1;                                 // linear, dynamic, yarn, llama3
  int64_t original_max_position_embeddings = 0;      // yarn, llama3
  double low_freq_factor = 0, high_freq_factor = 0;  // llama3
  // yarn: attention_factor when given, else derived from factor (and mscale / mscale_all_dim
  // when both are non-zero, as transformers does); beta_* and truncate shape the ramp.
  std::optional<double> attention_factor, mscale, mscale_all_dim, beta_fast, beta_slow;
  std::optional<bool> truncate;
};

// Checks the values a type needs; messages name `origin` and `key` (e.g. "rope_scaling").
absl::Status ValidateRopeScaling(const RopeScaling& scaling, const std::string& origin,
                                 const std::string& key);

struct RopeFrequencies {
  torch::Tensor inv_freq;  // [dim / 2] fp32; CPU, or the device a kernel-path step moved it to
  double attention_factor = 1;
};

// The frequencies of every type; for dynamic, those of sequences no longer than
// max_position_embeddings (the unscaled ones).
RopeFrequencies RopeInverseFrequencies(const RopeScaling& scaling, double theta, int64_t dim);

// Dynamic NTK: inverse frequencies [..., dim / 2] fp32 for int64 sequence lengths [...] (on
// their device): base * (factor * L / max_pos - (factor - 1)) ^ (dim / (dim - 2)) with
// L = max(length, max_pos), so lengths up to max_pos get the unscaled frequencies.
torch::Tensor DynamicNtkInverseFrequencies(const RopeScaling& scaling, double theta, int64_t dim,
                                           int64_t max_position_embeddings,
                                           const torch::Tensor& lengths);

}  // namespace rlforge::models
