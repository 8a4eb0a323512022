#include "bench/bench_models.h"

#include <torch/cuda.h>

#include "absl/strings/str_cat.h"

namespace rlforge::bench {

absl::StatusOr<models::TransformerConfig> BenchModelConfig(const std::string& size) {
  models::TransformerConfig c;
  c.architecture = "LlamaForCausalLM";
  c.num_attention_heads = 8;
  c.num_key_value_heads = 4;
  c.max_position_embeddings = 1024;
  if (size == "10m") {
    c.vocab_size = 8192, c.hidden_size = 256, c.intermediate_size = 768, c.num_hidden_layers = 8;
  } else if (size == "50m") {
    c.vocab_size = 16384, c.hidden_size = 512, c.intermediate_size = 1408, c.num_hidden_layers = 12;
  } else if (size == "qwen0.5b") {  // Qwen/Qwen2.5-0.5B's config.json
    c.architecture = "Qwen2ForCausalLM";
    c.vocab_size = 151936, c.hidden_size = 896, c.intermediate_size = 4864;
    c.num_hidden_layers = 24, c.num_attention_heads = 14, c.num_key_value_heads = 2;
    c.max_position_embeddings = 32768;
    c.rope_theta = 1000000;
    c.attention_bias = true;
    c.tie_word_embeddings = true;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--size ", size, ": expected 10m, 50m or qwen0.5b"));
  }
  c.head_dim = c.hidden_size / c.num_attention_heads;
  return c;
}

absl::StatusOr<torch::Dtype> BenchDtype(const std::string& dtype) {
  if (dtype == "float32") return torch::kFloat32;
  if (dtype == "bfloat16") return torch::kBFloat16;
  return absl::InvalidArgumentError(
      absl::StrCat("--dtype ", dtype, ": expected float32 or bfloat16"));
}

void SyncDevice(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

}  // namespace rlforge::bench
