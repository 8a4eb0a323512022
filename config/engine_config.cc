#include "config/engine_config.h"

#include "config/device.h"

namespace rlforge {

using config::SchemaBuilder;

void AddEngineSection(SchemaBuilder<JobConfig>& job) {
  SchemaBuilder<EngineOptions> b(
      "The LLM rollout engine: continuous batching over a paged KV cache.");
  b.Int("block_size", &EngineOptions::block_size, "Tokens per KV block.").Min(1).Max(1024);
  b.Int("num_blocks", &EngineOptions::num_blocks,
        "KV blocks in the pool; 0 sizes the pool from kv_memory_mb.")
      .Min(0);
  b.Double("kv_memory_mb", &EngineOptions::kv_memory_mb,
           "KV pool budget in MiB (keys and values, all layers) when num_blocks is 0.")
      .Min(0, false);
  b.Int("max_batch", &EngineOptions::max_batch, "Running sequences at most per step.")
      .Min(1)
      .Max(65536);
  b.Int("max_tokens_per_step", &EngineOptions::max_tokens_per_step,
        "Tokens fed to the model per step: decodes first, then prefill chunks (chunked "
        "prefill keeps long prompts from stalling decodes).")
      .Min(1);
  b.Bool("prefix_sharing", &EngineOptions::prefix_sharing,
         "The n samples of a prompt share its KV blocks, the last partial one included "
         "(samples write their own tokens from the next block boundary: the prompt's KV is "
         "stored once, never copied).");
  b.String("device", &EngineOptions::device,
           "Where the engine holds its model and KV pool: cpu, cuda (engine r on its host's GPU "
           "r) or cuda:N. On a GPU the model step runs through the CUDA kernels (docs/gpu.md).");
  b.Check([](const EngineOptions& e, config::CheckContext& ctx) { CheckDevice(e.device, ctx); });
  job.Section("engine", &JobConfig::engine, b.Build());
}

}  // namespace rlforge
