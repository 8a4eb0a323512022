// ModelRunner: runs the model over one scheduled step and draws the next tokens.
//
// scheduled step -> KV copies -> batch tensors (tokens, positions, paged index) -> prefill /
// decode forward over the paged KV pools -> logits rows -> sampler -> one token per drawer
//
// It owns the model, the KV pools and the decode graphs; the scheduler (rollout/scheduler.h)
// decides what a step computes and keeps the block accounting. The step runs either on the
// CPU engine's own code (fp32 on the CPU) or through the kernel library (rollout/kernel_ops.h):
// when asked, for a model on a CUDA device, or for one not in fp32.
//
// Not thread-safe: the engine's step thread owns it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "models/transformer.h"
#include "rollout/decode_graphs.h"
#include "rollout/kernel_ops.h"
#include "rollout/paged_attention.h"
#include "rollout/sampler.h"
#include "rollout/scheduler.h"

namespace rlforge {

struct ModelRunnerSettings {
  int64_t block_size = 16;
  int64_t num_blocks = 1024;
  int64_t max_batch = 256;
  bool use_kernel_library = false;       // EngineSettings::use_kernel_library
  bool cuda_graphs = true;               // EngineSettings::cuda_graphs
  bool pad_decode_steps_on_cpu = false;  // EngineSettings::pad_decode_steps_on_cpu
};

class ModelRunner {
 public:
  ModelRunner(models::Transformer model, const ModelRunnerSettings& settings);
  ~ModelRunner();

  // Computes the step's KV and one draw per step.drawers, in that order. An error (the model
  // or a kernel failing) names the step.
  absl::StatusOr<std::vector<SampledToken>> Run(const ScheduledStep& step);
  // After new weights were written into the model: the decode graphs read them by address.
  void WeightsChanged();

  models::Transformer& model() { return model_; }
  const models::Transformer& model() const { return model_; }
  bool uses_kernel_library() const { return use_kernels_; }
  const DecodeGraphs* decode_graphs() const { return graphs_.get(); }
  int64_t graph_steps() const { return graph_steps_; }

 private:
  struct StepInputs;
  // The KV pools in the model's dtype and device, and the decode graphs where they serve.
  void AllocatePools(const std::vector<torch::Tensor>& params);
  // KV pools' copy-on-write moves, before the step writes.
  void ApplyBlockCopies(const std::vector<BlockCopy>& copies);
  // The step's model inputs from the scheduled batch.
  StepInputs BuildStep(const ScheduledStep& step) const;
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

  models::Transformer model_;
  ModelRunnerSettings options_;
  torch::Device device_;      // the model's
  bool use_kernels_ = false;  // options_.use_kernel_library, a CUDA model or a non-fp32 one
  std::vector<torch::Tensor> k_pool_, v_pool_;
  std::unique_ptr<DecodeGraphs> graphs_;  // null: every step eager
  int64_t graph_steps_ = 0;
};

}  // namespace rlforge
