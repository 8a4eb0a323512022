// KernelOps: the thin libtorch adapter over the generation kernels (kernels/).
//
// torch::Tensors -> checks (dtype, shape, contiguity, device) -> kernels/kernel_args.h structs
//   -> CUDA launch (kernels/cuda_kernels.h) for CUDA tensors, CPU reference (kernels/reference.h)
//   for CPU tensors
//
// Both devices fill the same argument struct and so keep the same contract, which lets the
// engine's kernel path (EngineSettings::use_kernel_library) be tested on a CPU machine through
// the references before it runs on a GPU. The references are plain loops summing in double:
// correct, not fast; the CPU engine's own path (rollout/paged_attention.h) stays the fast one.
//
// fp32 and bf16 tensors; float dtypes of one call must agree. A bad argument returns
// InvalidArgument naming the op, the tensor and what was expected against what was given; a
// tensor on a device this build cannot launch on returns FailedPrecondition saying why. CUDA
// launches are asynchronous on the current stream of the tensors' device. Pure functions over
// their arguments; any thread (CUDA: the caller orders its streams).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "models/transformer.h"
#include "rollout/paged_attention.h"

namespace rlforge::kernel_ops {

// "" when CUDA tensors can go through the kernels in this build on this machine; otherwise why
// not (a CPU libtorch, no kernel library built, or no usable device).
std::string CudaUnavailableReason();

// A PagedBatch's index vectors as tensors on the KV pools' device, in the kernels' types.
struct PagedIndex {
  torch::Tensor row_seq, row_context;     // [rows] int32
  torch::Tensor row_slot;                 // [rows] int64: where each row's k, v go
  torch::Tensor tables, table_start;      // int32, as PagedBatch's
  torch::Tensor seq_skip_from, seq_skip;  // [sequences] int64, or undefined (no gaps)
  int64_t block_size = 0;
  int32_t max_context = 0;  // the largest row_context
};
absl::StatusOr<PagedIndex> ToDevice(const PagedBatch& batch, const torch::Device& device);

// k_pool[slots[r]] = k[r], v_pool[slots[r]] = v[r]. k, v: [rows, kv_heads, head_dim]; pools:
// [blocks, block_size, kv_heads, head_dim] contiguous; slots: [rows] int64.
absl::Status WriteKv(const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& slots,
                     torch::Tensor& k_pool, torch::Tensor& v_pool);

// Attention of q [rows, heads, head_dim] over each row's context in the pools (GQA: heads a
// multiple of the pools' kv_heads); returns [rows, heads, head_dim] in q's dtype.
absl::StatusOr<torch::Tensor> PagedAttention(const torch::Tensor& q, const torch::Tensor& k_pool,
                                             const torch::Tensor& v_pool, const PagedIndex& index,
                                             float scale);

// Each row's sampling settings for Sample: [rows] tensors on the logits' device.
struct SampleSettings {
  torch::Tensor temperature;  // fp32; <= 0: greedy (the lowest id among ties)
  torch::Tensor top_k;        // int32; 0: every token
  torch::Tensor top_p;        // fp32; 1: every token
  torch::Tensor seeds;        // int64, read as the bits of uint64 seeds (libtorch 1.13 has no
                              // uint64 dtype)
  torch::Tensor steps;        // int64, e.g. the drawn token's position
};
struct SampledRows {
  torch::Tensor tokens;    // [rows] int32
  torch::Tensor logprobs;  // [rows] fp32, under the untempered, untruncated distribution
};

// One token per row of logits [rows, vocab] by the sampler kernel (kernels/kernel_args.h's
// SampleArgs: top-k, then top-p, then Gumbel-max with noise from the row's seed and step), with
// the drawn token's logprob; both on the logits' device.
absl::StatusOr<SampledRows> Sample(const torch::Tensor& logits, const SampleSettings& settings);

// RMSNorm of x [rows, dim] by weight [dim], with the residual add fused in when `residual` is
// given (residual <- x + residual, normalised in its place); returns the normed rows.
absl::StatusOr<torch::Tensor> RmsNorm(const torch::Tensor& x, torch::Tensor* residual,
                                      const torch::Tensor& weight, float eps);

// Rotary embedding in place on q [rows, heads, head_dim] and k [rows, kv_heads, head_dim] at
// positions [rows] int64, with inv_freq [head_dim / 2] fp32 (models/rope.h) over the whole head.
absl::Status Rope(torch::Tensor& q, torch::Tensor& k, const torch::Tensor& positions,
                  const torch::Tensor& inv_freq, float attention_factor);

// silu(x[:, :inner]) * x[:, inner:] for x [rows, 2 * inner].
absl::StatusOr<torch::Tensor> SiluMul(const torch::Tensor& x);

// RmsNorm, Rope and SiluMul as the model's HiddenIncremental takes them; an error is thrown
// as std::runtime_error with the op's message (for the forward's CallCatching).
models::TransformerImpl::IncrementalKernels ModelKernels();

}  // namespace rlforge::kernel_ops
