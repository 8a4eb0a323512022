// DecodeGraphs: CUDA graphs of the engine's decode steps on the kernel path.
//
// decode step (B rows) -> padded to a captured size P >= B -> copied into P's static buffers
//   -> P's graph replayed (captured on first use) -> the B live rows' tokens and logprobs
//
// A decode step feeds one new token per sequence and draws one per row. One graph is captured
// per padded size (1, 2, 4, ..., max_batch) with every shape fixed: block tables padded to
// max_blocks columns, the attention grid sized for max_context (the kernel's partitions past a
// row's context exit at once), the sampler's per-row settings in buffers. Padding rows decode
// token 0 at position 0 against the scratch block, a KV pool block the block manager never
// hands out, so they write no slot a live row owns; their draws are dropped.
//
// A graph reads the model's parameters and the KV pools by address. The pools are never
// reallocated, and weight updates on a GPU copy into the parameters' storage (the in-place and
// staged loaders), so a graph stays valid across versions; the engine still calls
// ParametersMoved() after each update and drops the graphs if any parameter's storage did move.
//
// On a CPU model (tests only: EngineSettings::pad_decode_steps_on_cpu) nothing is captured: the
// same padded static-buffer step runs eagerly each time, so padding, the scratch block and the
// fixed shapes are tested without a GPU. Not thread-safe: the engine's thread only.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rollout/kernel_ops.h"
#include "rollout/paged_attention.h"
#include "rollout/sampler.h"

namespace rlforge {

// One kernel-path step's inputs on the model's device.
struct DeviceStep {
  torch::Tensor tokens, positions;  // [rows] int64
  kernel_ops::PagedIndex index;
  torch::Tensor logit_rows;  // [draws] int64: the hidden row each draw reads; undefined: every row
  kernel_ops::SampleSettings sampling;  // [draws] each
};
// Runs the model on a step and draws (device tensors in, device tensors out); throws on error.
using DeviceStepFn = std::function<kernel_ops::SampledRows(const DeviceStep&)>;

// The sampler's per-draw settings on the host, as kernel_ops::SampleSettings takes them.
struct HostSampling {
  std::vector<float> temperature, top_p;
  std::vector<int32_t> top_k;
  std::vector<int64_t> seeds, steps;
  kernel_ops::SampleSettings ToDevice(const torch::Device& device) const;
};

struct DecodeGraphOptions {
  torch::Device device = torch::kCPU;
  int64_t max_batch = 1;
  int64_t block_size = 1;
  int64_t max_blocks = 1;     // block table columns: the most blocks a sequence can hold
  int32_t scratch_block = 0;  // a pool block no sequence owns
  int32_t max_context = 1;    // the longest context a sequence can reach
};

class DecodeGraphs {
 public:
  DecodeGraphs(const DecodeGraphOptions& options, DeviceStepFn step);
  ~DecodeGraphs();

  // The captured size a step of `rows` rows pads to: the next power of two, capped at max_batch.
  static int64_t PaddedRows(int64_t rows, int64_t max_batch);

  // Whether a step these graphs can run: one row per sequence, each row drawing one token (no
  // fork), at most max_batch rows, every table within max_blocks, every context within
  // max_context.
  bool Serves(const PagedBatch& batch, int64_t draws) const;

  // Runs a step Serves() accepted: the live rows' draws, in row order.
  absl::StatusOr<std::vector<SampledToken>> Run(const std::vector<int64_t>& tokens,
                                                const std::vector<int64_t>& positions,
                                                const PagedBatch& batch,
                                                const HostSampling& sampling);

  // Drops every graph (captured again on next use) when a parameter's storage is not where it
  // was at capture: a loader that replaced tensors instead of copying into them.
  bool ParametersMoved(const std::vector<torch::Tensor>& params);

  int64_t graphs() const { return static_cast<int64_t>(graphs_.size()); }
  int64_t replays() const { return replays_; }
  int64_t drops() const { return drops_; }  // times ParametersMoved dropped the graphs

 private:
  struct Graph;
  absl::StatusOr<Graph*> GraphFor(int64_t padded_rows);
  // The step on g's buffers into g's outputs: a CUDA graph's replay (captured first if new), or
  // on a CPU model the step itself.
  absl::Status Replay(Graph& g);
  absl::Status Capture(Graph& g);

  DecodeGraphOptions options_;
  DeviceStepFn step_;
  std::map<int64_t, std::unique_ptr<Graph>> graphs_;
  std::vector<const void*> param_ptrs_;  // the parameters' storage at the first capture
  int64_t replays_ = 0, drops_ = 0;
};

}  // namespace rlforge
