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
  b.Typed<std::optional<bool>>(
      "cuda_graphs", &EngineOptions::cuda_graphs,
      "On a GPU (engine.device cuda): decode steps replay CUDA graphs, one captured per padded "
      "batch size on first use, instead of launching every kernel from the host (docs/gpu.md). "
      "auto: on for a cuda engine. A cpu engine has none: true there is an error.",
      "true, false or auto",
      [](const YAML::Node& n, std::optional<bool>* out, std::string* why) {
        if (n.IsScalar() && n.Scalar() == "auto") {
          out->reset();
          return true;
        }
        bool v = false;
        if (!config::ParseBool(n, &v, why)) return false;
        *out = v;
        return true;
      },
      [](const std::optional<bool>& v) {
        return v.has_value() ? YAML::Node(*v) : YAML::Node("auto");
      });
  b.Check([](const EngineOptions& e, config::CheckContext& ctx) {
    CheckDevice(e.device, ctx);
    if (e.device == "cpu" && e.cuda_graphs.value_or(false)) {
      ctx.Error("cuda_graphs",
                "true needs a GPU engine, and engine.device is cpu (CUDA graphs replay CUDA "
                "kernels only; set engine.device cuda, or drop the key)");
    }
  });
  job.Section("engine", &JobConfig::engine, b.Build());
}

}  // namespace rlforge
