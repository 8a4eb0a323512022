// The model shapes, devices and dtypes that the LM benches share (engine_bench, lm_train_bench):
//   --size 10m | 50m      Llama-style, random weights, 8 / 4 heads (the CPU tables' shapes)
//   --size qwen0.5b       Qwen2.5-0.5B's shape: hidden 896, intermediate 4864, 24 layers,
//                         14 / 2 heads, vocab 151936, tied embeddings, q/k/v bias
//   --device cpu | cuda | cuda:N   (models::TorchDevice: an error says why a build cannot)
//   --dtype float32 | bfloat16
#pragma once

#include <torch/torch.h>

#include <string>

#include "absl/status/statusor.h"
#include "models/transformer.h"

namespace rlforge::bench {

// The TransformerConfig of a --size; an error names the value and the sizes there are.
absl::StatusOr<models::TransformerConfig> BenchModelConfig(const std::string& size);

// --dtype's value as a torch dtype; an error names the value and what is accepted.
absl::StatusOr<torch::Dtype> BenchDtype(const std::string& dtype);

// Waits for the device's queued work (a no-op on the CPU), so a timer read after it covers it.
void SyncDevice(const torch::Device& device);

}  // namespace rlforge::bench
