// LmRolloutRole: the rollout worker of language-model jobs (GRPO).
//
// LmGenerate (new prompts) -> LlmEngine (continuous batching) -> finished groups, returned
// in chunks of at least min_groups as they complete; LoadWeights -> the weight stream
// (weights/bucket_stream.h: shm ring, gloo broadcast or an inline frame), read bucket by bucket
// between engine steps: in place into the parameters (weights.apply: in_place; a failed load
// leaves the engine torn, serving nothing), into a staged copy applied once whole (staged;
// a failed load leaves it on the previous version), or checked in the trainer's mapped segment
// and served from there, the parameters pointed at it (mapped; no copy; a failed load leaves it
// on the previous version).
//
// engine.device (models/device.h) places the model, so the engine and its KV pool, on a GPU.
// Over the host transports (shm, gloo, zmq) its weights are then read into host memory and
// copied to the device (in_place: between steps, a failed read leaving the engine refusing to
// serve as a torn load does; staged: read first, copied between steps). Over the device
// transports (weights.transport cuda_ipc: copied from the trainer's exported GPU slot; nccl:
// broadcast bucket by bucket into device buffers) a version goes device-to-device straight
// into the parameters between steps (in_place), or while the engine runs into a device copy
// of the parameters that is copied over them between steps (staged: a failed or torn read
// leaves the previous version).
//
// The tokenizer and model come from model.path (a Hugging Face checkpoint, e.g. the SFT
// stage's output); the engine from the `engine:` section. Stop: the tokenizer's eos.
#pragma once

#include <memory>
#include <optional>

#include "actors/role.h"
#include "models/lora.h"
#include "models/tokenizer.h"
#include "rollout/llm_engine.h"
#include "weights/bucket_stream.h"
#include "weights/cuda_ipc_plane.h"
#include "weights/device_broadcast.h"
#include "weights/device_stream.h"
#include "weights/gloo_plane.h"
#include "weights/shm_mapped.h"
#include "weights/shm_ring.h"

namespace rlforge {

class LmRolloutRole final : public Role {
 public:
  static absl::StatusOr<std::unique_ptr<Role>> Create(const JobConfig& config,
                                                      const proto::Assignment& assignment,
                                                      const SetupProgress& progress = {});
  absl::StatusOr<WorkReply> Handle(const proto::WorkRequest& request,
                                   std::vector<TensorFrame> tensors) override;
  int64_t policy_version() const override { return engine_->policy_version(); }
  LlmEngine& engine() { return *engine_; }

 private:
  LmRolloutRole() = default;
  absl::StatusOr<WorkReply> Generate(const proto::LmGenerate& task,
                                     const std::vector<TensorFrame>& tensors);
  absl::StatusOr<WorkReply> Load(const proto::LoadWeights& load,
                                 const std::vector<TensorFrame>& tensors);

  // trainer.lora: the stream's adapter tensors into `model`'s lora parameters, then merged.
  absl::Status ReadAdapters(const proto::WeightsReady& w, BucketSource& source,
                            models::Transformer& model, ReadStats* stats);
  // Where the version `load` names comes from (the ring is opened on first use; a gloo group
  // on first use and whenever the load names another one).
  absl::StatusOr<BucketSource*> SourceFor(const proto::LoadWeights& load,
                                          const std::vector<TensorFrame>& tensors);
  // Where a device transport's version comes from (cuda-ipc: the publisher's export, mapped
  // once per location; nccl: the weight group on this engine's GPU, as for gloo).
  absl::StatusOr<DeviceBucketSource*> DeviceSourceFor(const proto::LoadWeights& load);
  // Rank `load` names in broadcast group `group` on `device` ("cpu": gloo, "cuda:N": NCCL),
  // formed on first use and whenever the load names another group. `dropped` runs before an
  // old group goes (its source must settle first).
  absl::StatusOr<dist::Communicator*> WeightGroup(const proto::LoadWeights& load,
                                                  const std::string& group,
                                                  const std::string& device,
                                                  const std::function<void()>& dropped);
  // A version over a device transport, per weights.apply (in_place or staged); `stats` (the
  // caller's, it outlives the engine's update) filled once the read is done.
  absl::Status LoadOnDevice(const proto::LoadWeights& load, ReadStats* stats);
  // weights.apply mapped: checks w in the mapped segment (opened on first use), then has the
  // engine point its parameters at it between steps.
  absl::StatusOr<ReadStats> LoadMapped(const proto::WeightsReady& w);
  // Reads w into the parameters (or the staged copy) the manifest names.
  absl::StatusOr<ReadStats> ReadInto(const proto::WeightsReady& w, BucketSource& source,
                                     std::vector<Destination> targets);

  const JobConfig* config_ = nullptr;
  proto::Assignment assignment_;
  std::unique_ptr<models::Tokenizer> tokenizer_;
  // Declared before engine_: it outlives every parameter pointing into it (weights.apply mapped).
  std::unique_ptr<MappedSource> mapped_;
  std::string mapped_location_;
  std::unique_ptr<models::MergedLora> lora_;  // trainer.lora: before engine_, which it adapts
  std::unique_ptr<LlmEngine> engine_;
  uint64_t layout_hash_ = 0;
  std::vector<float> staged_;  // weights.apply: staged only
  std::unique_ptr<ShmRingSource> ring_;
  std::unique_ptr<dist::Communicator> weight_group_;
  std::string weight_group_name_;
  std::unique_ptr<GlooBroadcastSource> broadcast_;
  std::unique_ptr<DeviceBroadcastSource> device_broadcast_;  // weights.transport nccl
  std::unique_ptr<CudaIpcSource> ipc_;                       // weights.transport cuda_ipc
  std::vector<torch::Tensor> device_staged_;  // staged over a device transport: by parameter
  std::unique_ptr<MemorySource> inline_;
  std::vector<uint64_t> inline_sums_;
};

// Whether `location` (WeightsReady's) names a transport whose bytes stay on the GPU.
bool OnDeviceLocation(const std::string& location);

// The fp32 parameters of `model` (or views of `staged`, laid out in the same order) as the
// weight stream's destinations. Parameters on a GPU need `staged`.
std::vector<Destination> ParameterDestinations(torch::nn::Module& model, float* staged = nullptr);

// Points every parameter of `model` at its bytes in `base`, a version laid out as manifest `m`
// (float32) in read-only shared memory: nothing is copied, and the parameters' own memory is
// freed. `model` must match `m` (MatchDestinations). Nothing may write the parameters after.
void PointParametersAt(torch::nn::Module& model, const proto::WeightManifest& m, const char* base);

// Engine settings from the `engine:` section, the pool sized for `model`.
EngineSettings EngineSettingsFor(const EngineOptions& options,
                                 const models::TransformerConfig& model);

}  // namespace rlforge
