// The `engine:` section: the LLM rollout engine's scheduler and KV pool.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace rlforge {

struct EngineOptions {
  int64_t block_size = 16;
  int64_t num_blocks = 0;  // 0: from kv_memory_mb
  double kv_memory_mb = 256;
  int64_t max_batch = 256;
  int64_t max_tokens_per_step = 2048;
  bool prefix_sharing = true;
  std::string device = "cpu";  // "cpu" | "cuda" | "cuda:N" (config/device.h)
  // A GPU engine's decode steps replay CUDA graphs; unset ("auto"): on for a cuda device (a cpu
  // engine has none).
  std::optional<bool> cuda_graphs;
};

}  // namespace rlforge
