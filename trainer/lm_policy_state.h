// LmPolicyState: what every language-model learner role holds: the trainer ranks' group, the
// policy loaded from model.path sharded over them, AdamW over this rank's shard, and (rank 0)
// the weight plane's publishing end (weights/bucket_stream.h).
//
// model.path -> sharded policy (version 0) -> [role's updates] -> ++version -> Announce():
//   the step's reply names the version, where it will stream and its manifest ->
//   PublishWeights -> Stream(readers): gathered unit by unit, rank 0 packs each tensor into
//   the bucket stream (shm ring, mapped segment or gloo broadcast) while the engines load it;
//   never a second full copy. The controller asks again, for the same version, whenever new
//   engines (replacements, joiners) must load it: the ring streams it again under the new
//   publication number, a new gloo/nccl group gets it broadcast, cuda_ipc packs its slot
//   again, and the mapped segment, which still holds it, writes nothing. weights.transport zmq:
//   Announce packs the stream into an inline frame itself. cuda_ipc and nccl (a GPU trainer and GPU
//   engines): the units stay on the trainer's GPU and are packed there (weights/device_stream.h)
//   into the exported slot or the device broadcast buffers; nothing crosses host memory.
//
// Also the padded [B, T] batch the learners score sequences with. One thread; owned by its role.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "actors/role.h"
#include "config/job_config.h"
#include "dist/communicator.h"
#include "models/transformer.h"
#include "proto/lm_groups.h"
#include "trainer/flat_adamw.h"
#include "trainer/sharded_model.h"
#include "weights/bucket_stream.h"
#include "weights/cuda_ipc_plane.h"
#include "weights/device_broadcast.h"
#include "weights/device_stream.h"
#include "weights/gloo_plane.h"
#include "weights/shm_mapped.h"
#include "weights/shm_ring.h"

namespace rlforge {

// Groups packed one row each: [prompt, response 1, ..., response n]. The responses attend
// to their shared prompt (Hidden's shared_segment) and to themselves, so the prompt is
// computed once per group instead of n times, and nothing is padded but each row's tail.
// The math is that of n separate prompt + response sequences (tested against it).
//
// Per-token tensors are response-major, [S, R]: S samples in group order, R the longest
// response; column j is the sample's response token j (mask 1), predicted by the hidden
// state at `source` (the prompt's last token for j = 0).
struct GroupBatch {
  torch::Tensor tokens, positions, segments, shared;  // [G, L]
  torch::Tensor source;                               // [S, R] int64 into the [G * L] states
  torch::Tensor targets, mask, old_logp;              // [S, R]
};

// Fails, naming the request, when a group's prompt is empty (nothing predicts its first
// response token).
absl::StatusOr<GroupBatch> PackGroups(const std::vector<LmGroup>& groups);

// `b` on `device` (a model's, ShardedModel::device()): each tensor copied once, or b's own
// tensors where they are there already (the CPU trainer copies nothing).
GroupBatch ToDevice(const GroupBatch& b, torch::Device device);

// Hidden states [S, R, H] that predict each response token. (A sharded model's forward
// runs between its BeginForward and FinishBackward / EndForward.)
torch::Tensor GroupHidden(models::Transformer& model, const GroupBatch& b);

// Logprobs [S, R] of the response tokens under `model` (with gradient unless under
// NoGradGuard); the logits [S, R, V] they came from into *logits_out when given.
absl::StatusOr<torch::Tensor> GroupTokenLogprobs(models::Transformer& model, const GroupBatch& b,
                                                 torch::Tensor* logits_out = nullptr);

// Logprobs [S, R] of the response tokens under a sharded model, without gradient: gathers
// around the forward and frees after, in micro-batches of at most `micro_batch_size` sequences
// (whole groups; 0: one pass; trainer/micro_batch.h). Every rank calls it (collectives).
absl::StatusOr<torch::Tensor> ScoreTokenLogprobs(ShardedModel& model, const GroupBatch& b,
                                                 int64_t micro_batch_size = 0);

// A frozen copy of model.path (no gradient, eval mode) sharded over `comm`: the reference.
absl::StatusOr<std::unique_ptr<ShardedModel>> LoadFrozenReference(
    const JobConfig& config, dist::Communicator* comm, const SetupProgress& progress = {});

class LmPolicyState {
 public:
  // Joins the trainer ranks, loads model.path sharded over them, sets the seed and thread
  // count, builds AdamW over this rank's shard with trainer.* and, on rank 0, the publisher
  // (shared memory named after this process and actor unless weights.transport is zmq).
  // Catches libtorch's exceptions.
  // `progress` hears how far the load is.
  static absl::StatusOr<std::unique_ptr<LmPolicyState>> Create(const JobConfig& config,
                                                               const proto::Assignment& assignment,
                                                               const SetupProgress& progress = {});
  ~LmPolicyState();

  dist::Communicator& comm() { return *comm_; }
  ShardedModel& policy() { return *policy_; }
  FlatAdamW& optimizer() { return *optimizer_; }
  int64_t version() const { return version_; }

  // trainer.lr_schedule at the next optimiser step (counted here), set on the optimiser.
  double NextLearningRate(int64_t total_steps);
  // Clip by the global norm over ranks, step; returns the norm before clipping.
  double Step(double max_grad_norm);
  // Marks a new version (after the role's updates) and announces it. Every rank calls it.
  absl::StatusOr<WorkReply> AnnounceNewVersion();
  // The current version's WeightsReady (version, location, manifest; rank 0's reply). On the
  // inline path the weights are gathered and packed into a "weights" frame here.
  absl::StatusOr<WorkReply> Announce();
  // PublishWeights: the current version to `publish.readers` engines loading it now, as
  // stream `publish.publication` (the ring's tag), in gloo group `publish.group`. Every rank
  // gathers unit by unit; rank 0 streams. Rank 0's reply: the WeightsReady with every bucket's
  // checksum; metrics publish_s, weight_stream_bytes (0 when the mapped segment already held
  // the version: nothing is written, every rank skips the gather).
  absl::StatusOr<WorkReply> Stream(const proto::PublishWeights& publish);
  int64_t weight_bytes() const { return static_cast<int64_t>(manifest_.total_bytes()); }
  // LmSave: the current policy as a Hugging Face checkpoint in `dir` (model.dtype) with
  // model.path's tokenizer and chat template. Every rank gathers unit by unit; rank 0 writes.
  absl::StatusOr<WorkReply> Save(const std::string& dir);
  // Whole-job checkpoints: this rank's shards of the policy and AdamW moments in `dir`
  // (trainer/sharded_checkpoint.h, so a resume may change trainer.ranks) and, from rank 0,
  // dir/policy.json with the version and the schedule's step. Every rank calls both.
  absl::Status SaveJobState(const std::string& dir);
  // Reads them back; the caller then announces the restored version (Announce).
  absl::Status LoadJobState(const std::string& dir);

 private:
  explicit LmPolicyState(const JobConfig& config) : config_(config) {}

  const JobConfig& config_;
  std::unique_ptr<dist::Communicator> comm_;  // outlives the models that use it
  std::unique_ptr<ShardedModel> policy_;
  std::unique_ptr<FlatAdamW> optimizer_;
  // Gathers every unit and appends its tensors to `writer` (rank 0; null elsewhere). The
  // first failure of the writer is returned after the gather: the ranks stay in step.
  absl::Status GatherInto(BucketWriter* writer);
  // The same onto the device transports' writer: the units stay on the trainer's device.
  absl::Status GatherIntoDevice(DeviceBucketWriter* writer);
  // Rank 0's, made on first use and again for each new gloo group ("": kWeightGroup); the
  // ring begins the publication.
  absl::StatusOr<BucketSink*> Sink(const proto::PublishWeights& publish);
  // The same for the device transports (cuda_ipc's slots; nccl's broadcast group).
  absl::StatusOr<DeviceBucketSink*> DeviceSink(int readers, const std::string& group);
  // Rank 0 of the broadcast group `group` ("": kWeightGroup) with `readers` engines, on
  // `device` ("cpu": gloo; "cuda:N": NCCL), formed anew when the group's name changes.
  // `dropped` runs before an old group goes (its sink must drain first).
  absl::StatusOr<dist::Communicator*> WeightGroup(int readers, const std::string& group,
                                                  const std::string& device,
                                                  const std::function<void()>& dropped);
  // Streams the current version through the device path (rank 0: into `sink`).
  absl::Status StreamDevice(DeviceBucketSink* sink);

  // "shm-ring:/...", "shm-mapped:/...", "gloo:weights", "nccl:weights", "cuda-ipc:..." or
  // "inline"
  std::string location_;
  std::string store_address_;
  proto::WeightManifest manifest_;
  std::unique_ptr<ShmRingSink> ring_;
  std::unique_ptr<MappedSink> mapped_;                // weights.apply: mapped
  std::unique_ptr<dist::Communicator> weight_group_;  // rank 0 of the weight group (gloo)
  std::string weight_group_name_;
  std::unique_ptr<GlooBroadcastSink> broadcast_;
  std::unique_ptr<DeviceBroadcastSink> device_broadcast_;  // weights.transport nccl
  std::unique_ptr<CudaIpcSink> ipc_;                       // weights.transport cuda_ipc
  uint64_t layout_hash_ = 0;
  int64_t version_ = 0;
  // weights.apply mapped: the version the segment holds whole (every rank keeps it, so all
  // agree to skip the gather), and its buckets' checksums (rank 0); -1: none yet.
  int64_t segment_version_ = -1;
  std::vector<uint64_t> segment_sums_;
  int64_t optimizer_steps_ = 0;
};

}  // namespace rlforge
