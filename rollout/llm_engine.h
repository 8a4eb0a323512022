// LlmEngine: continuous-batching generation over a paged KV cache.
//
// requests -> scheduler (decodes first, then chunked prefill, preemption by
// recompute) -> model runner (HiddenIncremental + paged attention) -> sampler ->
// finished groups
//
// The engine is the loop of nano-vllm's split: the scheduler (rollout/scheduler.h: admission,
// continuous batching, KV block accounting, preemption, prefix sharing, stop checks) picks each
// step's work and the model runner (rollout/model_runner.h: batch tensors, forward, sampling)
// computes it; the engine adds request checks against the model and weight updates between
// steps. The model's step runs either on the CPU engine's own code (the default) or through the
// kernel library (EngineSettings::use_kernel_library, a model on a CUDA device, or one not in
// fp32: the engine's own code is fp32 only).
//
// A request asks for n samples of one prompt (a GRPO group). With prefix
// sharing on, the prompt is prefilled once and its KV blocks are shared by
// the n samples, its last partial block too (so prompts shorter than a block
// share as well): each sample writes its own tokens from the next block
// boundary on, leaving the rest of that block unused instead of copying it,
// so the prompt's KV is stored exactly once. Each step admits and retires sequences, so the
// running batch changes at every step. When the pool runs out of blocks the
// most recently admitted sequence is preempted: its blocks are freed and it
// is recomputed later from its tokens, so no request is ever lost.
//
// Every sampled token carries its logprob under the unmodified policy and the
// policy version that produced it. New weights arrive through
// RequestWeightUpdate and are applied between steps, per the update mode.
//
// Not thread-safe: one thread submits, steps and collects. The model's
// parameters are read during Step() and written only by weight updates,
// which Step() applies itself.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "models/transformer.h"
#include "rollout/block_manager.h"
#include "rollout/decode_graphs.h"
#include "rollout/generation.h"
#include "rollout/model_runner.h"
#include "rollout/sampler.h"
#include "rollout/scheduler.h"

namespace rlforge {

struct EngineSettings {
  int64_t block_size = 16;
  int64_t num_blocks = 1024;
  int64_t max_batch = 256;  // running sequences at most
  int64_t max_tokens_per_step =
      2048;  // tokens fed to the model per step (prefill chunks + decodes)
  bool prefix_sharing = true;
  // "drain": in-flight sequences finish on the old weights (tagged with the old
  // version) before the new ones are taken; "recompute": new weights are taken
  // at once and in-flight sequences recompute their KV under them.
  std::string weight_update = "drain";
  // Turns generated token ids into text for stop strings; empty: stop strings unsupported.
  std::function<std::string(const std::vector<int32_t>&)> detokenize;
  // Not a config key: KV writes, paged attention, the model's RMSNorms (residual fused), RoPE
  // and SiLU-and-multiply, and sampling go through the kernel library's adapter
  // (rollout/kernel_ops.h) instead of the CPU engine's own code, with KV pools in the model's
  // dtype on the model's device; only the drawn tokens and their logprobs leave the device,
  // never the logits. Draws differ from the own path's (another random stream: the sampler
  // kernel's, seeded by SampleSeed and the token's position); greedy ones agree. On a CPU model
  // that runs the kernels' CPU references (slow; how the path is tested without a GPU); a
  // model on a CUDA device, or in another dtype than fp32, always takes this path.
  bool use_kernel_library = false;
  // engine.cuda_graphs: decode steps of a model on a CUDA device replay CUDA graphs captured per
  // padded batch size (rollout/decode_graphs.h); off: every step launches its kernels one by one.
  // No effect on a CPU model.
  bool cuda_graphs = true;
  // Not a config key (tests): a CPU model on the kernel path runs its decode steps as the graphs
  // do, padded into static buffers, eagerly, so padding is tested without a GPU.
  bool pad_decode_steps_on_cpu = false;
};

struct EngineStats {
  int64_t steps = 0;
  int64_t generated_tokens = 0;
  int64_t prefill_tokens = 0;  // tokens fed as prefill, recompute included
  int64_t preemptions = 0;
  int64_t peak_blocks = 0;
  int64_t prompt_kv_slots = 0;  // KV slots ever written with prompt tokens (copies included)
  int64_t cow_copies = 0;
  int64_t max_running = 0;
  int64_t graph_steps = 0;  // decode steps run through DecodeGraphs
};

class LlmEngine {
 public:
  LlmEngine(models::Transformer model, const EngineSettings& settings, int64_t policy_version);
  ~LlmEngine();

  // Queues a request. Errors (and changes nothing) when the prompt is empty,
  // holds a token outside the vocabulary, or cannot fit the pool alone.
  absl::Status Submit(GenerationRequest request);

  // One scheduling step: admit, run the model on the batch, sample, retire.
  absl::Status Step();
  // Steps until every submitted request has finished.
  absl::Status RunToCompletion();

  // Groups whose n samples have all finished since the last call.
  std::vector<FinishedGroup> TakeFinished();
  bool HasUnfinished() const { return scheduler_.HasUnfinished(); }
  int64_t num_running() const { return scheduler_.num_running(); }

  // New weights for version `version`: `apply` writes them into the model. It
  // runs inside a later Step(), when the update mode allows. An `apply` that fails part way
  // (a weight stream cut or corrupted while written in place) leaves the engine torn: that
  // Step and every later one fail, until an update succeeds.
  void RequestWeightUpdate(std::function<absl::Status(models::Transformer&)> apply,
                           int64_t version);
  bool weight_update_pending() const { return pending_update_ != nullptr; }
  int64_t policy_version() const { return version_; }
  // Whether the model step goes through the kernel library (see EngineSettings).
  bool uses_kernel_library() const { return runner_.uses_kernel_library(); }
  // Why the weights are torn ("" when they are a whole version).
  const std::string& torn() const { return torn_; }

  const EngineStats& stats() const { return stats_; }
  const BlockManager& blocks() const { return scheduler_.blocks(); }
  // The decode graphs, or null where steps run eagerly (EngineSettings::cuda_graphs).
  const DecodeGraphs* decode_graphs() const { return runner_.decode_graphs(); }
  models::Transformer& model() { return runner_.model(); }

 private:
  struct PendingUpdate;

  // Submit's checks against the model: a prompt token outside the vocabulary, named with its id.
  absl::Status CheckTokens(const GenerationRequest& request) const;
  absl::Status MaybeApplyWeightUpdate();
  // stats_ from the scheduler's and the model runner's counters.
  void UpdateStats();

  EngineSettings options_;
  int64_t version_;
  Scheduler scheduler_;
  ModelRunner runner_;
  std::unique_ptr<PendingUpdate> pending_update_;
  std::string torn_;
  EngineStats stats_;
};

}  // namespace rlforge
