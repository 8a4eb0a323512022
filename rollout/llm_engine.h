// LlmEngine: continuous-batching generation over a paged KV cache.
//
// requests -> scheduler (decodes first, then chunked prefill, preemption by
// recompute) -> model (HiddenIncremental + paged attention) -> sampler ->
// finished groups
//
// The model's step runs either on the CPU engine's own code (the default) or through the
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
#include "rollout/sampler.h"

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

struct GenerationRequest {
  uint64_t id = 0;
  std::vector<int32_t> prompt;
  int64_t n = 1;
  SamplingParams params;
};

struct GeneratedSample {
  int64_t index = 0;              // 0..n-1 within the group
  std::vector<int32_t> tokens;    // generated tokens (the stop token included)
  std::vector<float> logprobs;    // one per token, unmodified policy
  std::vector<int64_t> versions;  // policy version that sampled each token
  std::string finish_reason;      // "stop" (stop token or string) or "length"
};

struct FinishedGroup {
  uint64_t request_id = 0;
  std::vector<int32_t> prompt;
  std::vector<GeneratedSample> samples;  // ordered by index
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
  bool HasUnfinished() const;
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }

  // New weights for version `version`: `apply` writes them into the model. It
  // runs inside a later Step(), when the update mode allows. An `apply` that fails part way
  // (a weight stream cut or corrupted while written in place) leaves the engine torn: that
  // Step and every later one fail, until an update succeeds.
  void RequestWeightUpdate(std::function<absl::Status(models::Transformer&)> apply,
                           int64_t version);
  bool weight_update_pending() const { return pending_update_ != nullptr; }
  int64_t policy_version() const { return version_; }
  // Whether the model step goes through the kernel library (see EngineSettings).
  bool uses_kernel_library() const { return use_kernels_; }
  // Why the weights are torn ("" when they are a whole version).
  const std::string& torn() const { return torn_; }

  const EngineStats& stats() const { return stats_; }
  const BlockManager& blocks() const { return blocks_; }
  // The decode graphs, or null where steps run eagerly (EngineSettings::cuda_graphs).
  const DecodeGraphs* decode_graphs() const { return graphs_.get(); }
  models::Transformer& model() { return model_; }

 private:
  struct Sequence;
  struct Group;
  struct PendingUpdate;

  // Submit's checks: what makes a request unservable, named with its id.
  absl::Status CheckRequest(const GenerationRequest& request) const;
  absl::Status MaybeApplyWeightUpdate();
  bool Schedule(std::vector<Sequence*>& batch, std::vector<int64_t>& chunk);
  void Preempt(Sequence* seq);
  struct StepInputs;
  absl::Status RunModel(const std::vector<Sequence*>& batch, const std::vector<int64_t>& chunk);
  // The step's model inputs from the scheduled batch; forks shared prompts that end this step.
  StepInputs BuildStep(const std::vector<Sequence*>& batch, const std::vector<int64_t>& chunk);
  // The model's forward over `in` and one draw per in.drawers (throws, for CallCatching).
  std::vector<SampledToken> Forward(const StepInputs& in);
  // The kernel path's step: a decode graph's when one serves it, else eagerly. Only the drawn
  // tokens and their logprobs leave the device.
  std::vector<SampledToken> KernelForward(const StepInputs& in);
  // The model and the sampler kernel on device tensors: what a decode graph captures.
  kernel_ops::SampledRows KernelStep(const DeviceStep& in);
  // Each drawer's sampler settings: its request's, its seed (SampleSeed), its token's position.
  HostSampling SamplingOf(const StepInputs& in, int64_t vocab) const;
  // The CPU engine's own draws from fp32 logits on the CPU, through SampleToken.
  std::vector<SampledToken> OwnDraws(const torch::Tensor& logits, const StepInputs& in);
  // The samples that continue the leader; they take its place in the running batch.
  std::vector<Sequence*> Fork(Sequence* leader);
  // A drawn token onto its sequence (tokens, logprob, version, stop check).
  void Append(Sequence* seq, const SampledToken& draw);
  // Frees finished sequences and hands over groups whose samples have all finished.
  void Retire();
  // KV pools' copy-on-write moves, before the step writes.
  void ApplyBlockCopies();
  bool StopsAt(Sequence* seq) const;

  models::Transformer model_;
  EngineSettings options_;
  int64_t version_;
  BlockManager blocks_;
  torch::Device device_;      // the model's
  bool use_kernels_ = false;  // options_.use_kernel_library, a CUDA model or a non-fp32 one
  std::vector<torch::Tensor> k_pool_, v_pool_;
  std::unique_ptr<DecodeGraphs> graphs_;  // null: every step eager
  std::vector<std::unique_ptr<Group>> groups_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;  // admission order
  std::vector<BlockCopy> pending_copies_;
  std::vector<FinishedGroup> finished_;
  std::unique_ptr<PendingUpdate> pending_update_;
  std::string torn_;
  EngineStats stats_;
  int64_t admission_counter_ = 0;
};

}  // namespace rlforge
