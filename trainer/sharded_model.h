// ShardedModel: a Transformer whose parameters, gradients and optimizer state are split
// over the ranks of a Communicator, FSDP-style (as PyTorch FSDP2 does it).
//
// shards (1/N of every unit, fp32) -> all-gather a unit before its forward -> compute ->
//   free it (reshard_after_forward) -> backward gathers it again -> its gradients are
//   reduce-scattered into this rank's grad shard as soon as its backward finished -> AdamW
//   steps the shard -> GatherUnits streams full units out (weights, checkpoints)
//
// Units, in module order: the embedding; one per transformer layer; the head (final norm,
// lm_head, value head). The embedding is gathered by BeginForward and freed once looked up
// (its backward needs only the token ids) — or, with tied embeddings (it is the lm_head
// too), held until FinishBackward / EndForward; the head is gathered with the last layer and
// freed once its backward finished. A unit's parameters are flattened in module order,
// padded to a multiple of N; rank r owns elements [r * k, (r + 1) * k) of every unit. While
// layer i computes, the next unit's all-gather is in flight (prefetch); in backward, layer
// i - 1's. A unit's gradients accumulate in one flat buffer, reduce-scattered as soon as its
// backward finished (the embedding's and the first layer's at FinishBackward).
//
// With one rank nothing is gathered or freed: parameters and gradients are views of the
// shard buffers (the unsharded trainer's FlatAdamW layout, at its cost).
//
// Use per step: BeginForward; forward (the model's layer hooks do the rest); loss.backward();
// FinishBackward (returns the first collective error); then the optimizer on shard_data()
// and shard_grad(). A forward without backward (reference, critic scoring, eval) ends with
// EndForward. Collectives run in the same order on every rank, so every rank runs every
// forward and backward, with an empty share of the batch if it has none (the callers feed a
// one-token sequence with weight 0). One thread. A collective error inside a hook throws
// (libtorch's way out of a forward or backward); callers run under CallCatching.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dist/communicator.h"
#include "models/transformer.h"

namespace rlforge {

struct ShardedParam {
  std::string name;  // Hugging Face name
  std::vector<int64_t> shape;
  int64_t offset = 0;  // in the unit's flat layout
  int64_t numel = 0;
};

struct ShardUnit {
  std::string name;  // "embed", "layer <i>" or "head"
  std::vector<ShardedParam> params;
  int64_t numel = 0;
  int64_t padded = 0;  // numel rounded up to a multiple of the rank count
};

class ShardedModel {
 public:
  struct Options {
    bool reshard_after_forward = true;  // free a layer after its forward (ZeRO-3), else after
                                        // its backward
    bool prefetch = true;               // gather the next layer while this one computes
    bool trainable = true;              // false: a frozen model (no gradients)
    torch::Dtype compute_dtype = torch::kFloat32;  // kBFloat16: gathered and computed in bf16,
                                                   // gradients reduced in fp32
    // Where shards, gathered units, gradients (and the optimizer adopting the shards) live and
    // the module computes. A GPU needs a communicator that reaches its memory: the gloo one
    // only moves CPU tensors, so a GPU model has one rank (config/job_config.cc refuses more).
    torch::Device device = torch::kCPU;
    // Parameters this names stay out of the units (not sharded, gathered, streamed, saved
    // or optimised): a frozen base under trained adapters (models/lora.h). They move to
    // `device` whole on every rank, without gradient.
    std::function<bool(const std::string& name)> frozen;
  };

  // Takes `model` (every rank holds the same values, e.g. from one checkpoint or seed), keeps
  // this rank's shard of every unit and frees the rest. `comm` must outlive this object.
  static absl::StatusOr<std::unique_ptr<ShardedModel>> Create(models::Transformer model,
                                                              dist::Communicator* comm,
                                                              Options options);
  ~ShardedModel();

  models::Transformer& module() { return model_; }
  const std::vector<ShardUnit>& units() const { return units_; }
  dist::Communicator& comm() { return *comm_; }
  int64_t shard_offset(size_t unit) const { return shard_offsets_[unit]; }
  torch::Device device() const { return options_.device; }

  // This rank's shards of every unit, concatenated (fp32, on device()); their gradients.
  const torch::Tensor& shard_data() const { return shard_data_; }
  const torch::Tensor& shard_grad() const { return shard_grad_; }
  void ZeroGrad();

  // Gathers the embedding (and prefetches layer 0); the module may then run forward.
  void BeginForward();
  // After a forward without backward: frees everything gathered.
  absl::Status EndForward();
  // After loss.backward(): reduce-scatters the gradients not yet reduced, waits for every
  // collective, frees everything gathered. Gradients accumulate over calls until ZeroGrad.
  absl::Status FinishBackward();

  // Where GatherUnits hands each unit's values: staged to the CPU for sinks that read raw host
  // pointers, or left on device() for sinks that are torch code on the device (the GPU weight
  // transports, weights/device_stream.h).
  enum class GatherTo { kCpu, kDevice };
  // Gathers unit by unit (in module order) and calls sink(unit, flat full values [numel], fp32,
  // contiguous) for each; never more than one unit is held at a time. kCpu: on a GPU each unit
  // is staged through a CPU copy; on the CPU the values are the shard or gathered buffer
  // itself, no copy. kDevice: the values stay on device(), no copy anywhere. Every rank must
  // call it; `sink` runs on every rank (a rank that does not need the values ignores it).
  absl::Status GatherUnits(
      const std::function<absl::Status(const ShardUnit&, const torch::Tensor&)>& sink,
      GatherTo to = GatherTo::kCpu);

  // Bytes of parameters and gradients this rank holds now (shards, gathered units, live
  // parameter gradients), counted from the tensors' storages.
  int64_t HeldBytes() const;

 private:
  struct UnitState;
  ShardedModel(models::Transformer model, dist::Communicator* comm, Options options);
  absl::Status Build();
  void Gather(size_t u);        // issues the all-gather (no-op if gathered or in flight)
  void WaitGathered(size_t u);  // throws on a collective error
  void Free(size_t u);
  void PrepareGrads(size_t u);  // points u's parameter gradients into one zeroed flat buffer
  void ReduceGrads(size_t u);   // issues the reduce-scatter of a unit whose backward finished
  torch::Tensor AfterLayer(int64_t layer, const torch::Tensor& out);
  void BeforeLayer(int64_t layer);
  size_t LayerUnit(int64_t layer) const { return static_cast<size_t>(layer) + 1; }
  // Wait for u's all-gather / reduce-scatter in flight, if any (the latter's result is added
  // into the gradient shard); a failure is kept in error_.
  void FinishGather(size_t u);
  void FinishReduce(size_t u);
  absl::Status WaitAll();
  // One rank computing in fp32: parameters and gradients live in the shard buffers.
  bool resident() const { return comm_->size() == 1 && options_.compute_dtype == torch::kFloat32; }
  // Gathered units and their gradients: the compute dtype, on the device.
  torch::TensorOptions ComputeOptions() const {
    return torch::dtype(options_.compute_dtype).device(options_.device);
  }
  bool tied_ = false;  // tied embeddings: the embedding unit is the lm_head too

  models::Transformer model_;
  dist::Communicator* comm_;
  Options options_;
  std::vector<ShardUnit> units_;
  std::vector<int64_t> shard_offsets_;
  std::vector<std::unique_ptr<UnitState>> state_;
  torch::Tensor shard_data_, shard_grad_;
  absl::Status error_;
};

}  // namespace rlforge
