#include "trainer/lm_policy_state.h"

#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/clock.h"
#include "common/exceptions.h"
#include "common/status.h"
#include "models/actor_critic.h"
#include "models/compute_threads.h"
#include "models/hf_checkpoint.h"
#include "models/tokenizer.h"
#include "nlohmann/json.hpp"
#include "trainer/lm_losses.h"
#include "trainer/lm_metrics.h"
#include "trainer/lora_policy.h"
#include "trainer/lr_schedule.h"
#include "trainer/micro_batch.h"
#include "trainer/sharded_checkpoint.h"
#include "trainer/trainer_ranks.h"
#include "weights/shm_segment.h"
#include "weights/weight_transport.h"

namespace rlforge {

absl::StatusOr<GroupBatch> PackGroups(const std::vector<LmGroup>& groups) {
  const int64_t G = static_cast<int64_t>(groups.size());
  int64_t S = 0, L = 1, R = 1;
  for (const auto& g : groups) {
    if (g.prompt.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "request ", g.request_id, " has an empty prompt: nothing predicts its first token"));
    }
    int64_t len = static_cast<int64_t>(g.prompt.size());
    for (const auto& s : g.samples) {
      ++S;
      len += static_cast<int64_t>(s.tokens.size());
      R = std::max<int64_t>(R, s.tokens.size());
    }
    L = std::max(L, len);
  }
  GroupBatch b;
  b.tokens = torch::zeros({G, L}, torch::kLong);
  b.positions = torch::zeros({G, L}, torch::kLong);
  b.segments = torch::full({G, L}, -1, torch::kLong);
  b.shared = torch::full({G, L}, -2, torch::kLong);
  b.source = torch::zeros({S, R}, torch::kLong);
  b.targets = torch::zeros({S, R}, torch::kLong);
  b.mask = torch::zeros({S, R});
  b.old_logp = torch::zeros({S, R});
  auto tok = b.tokens.accessor<int64_t, 2>();
  auto pos = b.positions.accessor<int64_t, 2>();
  auto seg = b.segments.accessor<int64_t, 2>();
  auto shr = b.shared.accessor<int64_t, 2>();
  auto src = b.source.accessor<int64_t, 2>();
  auto tgt = b.targets.accessor<int64_t, 2>();
  auto mask = b.mask.accessor<float, 2>();
  auto old = b.old_logp.accessor<float, 2>();
  int64_t row = 0;
  for (int64_t g = 0; g < G; ++g) {
    const LmGroup& grp = groups[g];
    const int64_t p = static_cast<int64_t>(grp.prompt.size());
    for (int64_t t = 0; t < p; ++t) {
      tok[g][t] = grp.prompt[t];
      pos[g][t] = t;
      seg[g][t] = 0;
    }
    int64_t col = p;
    for (size_t k = 0; k < grp.samples.size(); ++k, ++row) {
      const LmSample& s = grp.samples[k];
      int64_t prev = g * L + p - 1;  // the state that predicts the next token
      for (size_t j = 0; j < s.tokens.size(); ++j, ++col) {
        tok[g][col] = s.tokens[j];
        pos[g][col] = p + static_cast<int64_t>(j);
        seg[g][col] = static_cast<int64_t>(k) + 1;
        shr[g][col] = 0;
        src[row][j] = prev;
        tgt[row][j] = s.tokens[j];
        mask[row][j] = 1;
        old[row][j] = j < s.logprobs.size() ? s.logprobs[j] : 0.0f;
        prev = g * L + col;
      }
    }
  }
  return b;
}

GroupBatch ToDevice(const GroupBatch& b, torch::Device device) {
  GroupBatch out;
  for (torch::Tensor GroupBatch::*t :
       {&GroupBatch::tokens, &GroupBatch::positions, &GroupBatch::segments, &GroupBatch::shared,
        &GroupBatch::source, &GroupBatch::targets, &GroupBatch::mask, &GroupBatch::old_logp}) {
    out.*t = (b.*t).to(device);  // the same tensor when it is there already
  }
  return out;
}

torch::Tensor GroupHidden(models::Transformer& model, const GroupBatch& b) {
  torch::Tensor h = model->Hidden(b.tokens, b.positions, b.segments, b.shared);
  const int64_t H = h.size(2);
  return h.reshape({-1, H})
      .index_select(0, b.source.reshape({-1}))
      .view({b.source.size(0), b.source.size(1), H});
}

absl::StatusOr<torch::Tensor> GroupTokenLogprobs(models::Transformer& model, const GroupBatch& b,
                                                 torch::Tensor* logits_out) {
  torch::Tensor logits = model->Logits(GroupHidden(model, b));
  if (logits_out != nullptr) *logits_out = logits;
  return TokenLogprobs(logits, b.targets);
}

absl::StatusOr<torch::Tensor> ScoreTokenLogprobs(ShardedModel& model, const GroupBatch& b,
                                                 int64_t micro_batch_size) {
  torch::NoGradGuard ng;
  ASSIGN_OR_RETURN(const int64_t micro, MicroBatchCount(model.comm(), b, micro_batch_size));
  ASSIGN_OR_RETURN(LogprobPass pass, MicroBatchedLogprobs(model, b, micro, false, false, nullptr));
  return pass.logp;
}

absl::StatusOr<std::unique_ptr<ShardedModel>> LoadFrozenReference(const JobConfig& config,
                                                                  dist::Communicator* comm,
                                                                  const SetupProgress& progress) {
  ASSIGN_OR_RETURN(const ShardedModel::Options options,
                   ShardingOptions(config.trainer, comm->rank(), /*trainable=*/false));
  ASSIGN_OR_RETURN(std::unique_ptr<ShardedModel> ref,
                   LoadShardedModel(config.model.path, comm, options, /*value_head=*/false,
                                    progress, "loading the reference model"));
  ref->module()->eval();
  return ref;
}

absl::StatusOr<std::unique_ptr<LmPolicyState>> LmPolicyState::Create(
    const JobConfig& config, const proto::Assignment& assignment, const SetupProgress& progress) {
  if (config.model.path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.path: job.algorithm ", config.job.algorithm->name,
        " starts from a checkpoint (e.g. the SFT stage's runs/<name>/checkpoints/step_<N>)"));
  }
  SetComputeThreads(config.trainer.threads, config.trainer.ranks);
  torch::manual_seed(static_cast<uint64_t>(config.job.seed));
  std::unique_ptr<LmPolicyState> s(new LmPolicyState(config));
  if (progress && config.trainer.ranks > 1) progress("meeting the other trainer ranks");
  ASSIGN_OR_RETURN(s->comm_, ConnectTrainerRanks(assignment, config.trainer));
  ASSIGN_OR_RETURN(const ShardedModel::Options options,
                   ShardingOptions(config.trainer, s->comm_->rank(), /*trainable=*/true));
  ASSIGN_OR_RETURN(s->policy_,
                   LoadPolicy(config, s->comm_.get(), options, progress, "loading model"));
  return CallCatching([&]() -> absl::StatusOr<std::unique_ptr<LmPolicyState>> {
    s->optimizer_ = std::make_unique<FlatAdamW>(s->policy_->shard_data(), s->policy_->shard_grad(),
                                                AdamWOptions(config.trainer, config.trainer.lr));
    s->layout_hash_ = LayoutHash(*s->policy_->module());
    std::vector<TensorSpec> specs;  // in the order GatherUnits streams them
    for (const ShardUnit& u : s->policy_->units()) {
      for (const ShardedParam& p : u.params) specs.push_back({p.name, p.shape});
    }
    const WeightsOptions& w = config.weights;
    s->manifest_ = MakeManifest(specs, std::string(ChoiceName(w.dtype)), WeightBucketBytes(w));
    s->store_address_ = assignment.store_address();
    const WeightTransport transport = ResolveWeightTransport(config);
    if (transport == WeightTransport::kZmq) {
      s->location_ = "inline";
    } else if (IsGroupWeightTransport(transport)) {
      s->location_ = absl::StrCat(WeightTransportName(transport), ":", kWeightGroup);
    } else if (s->comm_->rank() == 0) {
      const std::string name = PublisherSegmentName(assignment.actor_id());
      if (transport == WeightTransport::kCudaIpc) {
        ASSIGN_OR_RETURN(s->ipc_, CudaIpcSink::Create(name, s->manifest_, s->policy_->device()));
        s->location_ = s->ipc_->location();
      } else if (w.apply == WeightApply::kMapped) {
        ASSIGN_OR_RETURN(s->mapped_, MappedSink::Create(name, s->manifest_, w.timeout_s));
        s->location_ = s->mapped_->location();
      } else {
        ASSIGN_OR_RETURN(s->ring_,
                         ShmRingSink::Create(name, s->manifest_.bucket_bytes(), w.timeout_s));
        s->location_ = s->ring_->location();
      }
    }
    return std::move(s);
  });
}

LmPolicyState::~LmPolicyState() = default;

absl::StatusOr<WorkReply> LmPolicyState::Save(const std::string& dir) {
  const Stopwatch timer;
  RETURN_IF_ERROR(SavePolicy(config_, *policy_, dir));
  WorkReply reply;
  if (comm_->rank() != 0) return reply;
  ASSIGN_OR_RETURN(std::unique_ptr<models::Tokenizer> tokenizer,
                   models::LoadTokenizer(config_.model.path));
  RETURN_IF_ERROR(models::SaveTokenizer(*tokenizer, dir));
  (*reply.result.mutable_metrics())["save_s"] = timer.Seconds();
  return reply;
}

absl::Status LmPolicyState::SaveJobState(const std::string& dir) {
  RETURN_IF_ERROR(SaveShardedState(dir, *policy_, *optimizer_));
  if (comm_->rank() != 0) return absl::OkStatus();
  const nlohmann::json j{{"version", version_}, {"optimizer_steps", optimizer_steps_}};
  return WriteFileAtomic(dir + "/policy.json", j.dump() + "\n");
}

absl::Status LmPolicyState::LoadJobState(const std::string& dir) {
  RETURN_IF_ERROR(LoadShardedState(dir, *policy_, *optimizer_));
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(dir + "/policy.json"));
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.contains("version") || !j.contains("optimizer_steps")) {
    return absl::DataLossError(dir + "/policy.json: no version and optimizer_steps");
  }
  version_ = j["version"].get<int64_t>();
  optimizer_steps_ = j["optimizer_steps"].get<int64_t>();
  segment_version_ = -1;  // the restored weights are not what the segment holds
  return absl::OkStatus();
}

double LmPolicyState::NextLearningRate(int64_t total_steps) {
  const double lr =
      ScheduledLearningRate(config_.trainer, optimizer_steps_++, std::max<int64_t>(1, total_steps));
  optimizer_->set_lr(lr);
  return lr;
}

double LmPolicyState::Step(double max_grad_norm) {
  const double norm = optimizer_->ClipGradNorm(max_grad_norm, comm_.get());
  optimizer_->Step();
  return norm;
}

absl::StatusOr<WorkReply> LmPolicyState::AnnounceNewVersion() {
  ++version_;
  return Announce();
}

absl::Status LmPolicyState::GatherInto(BucketWriter* writer) {
  absl::Status first;
  RETURN_IF_ERROR(policy_->GatherUnits([&](const ShardUnit& unit, const torch::Tensor& flat) {
    if (writer == nullptr || !first.ok()) return absl::OkStatus();
    if (!flat.is_cpu() || !flat.is_contiguous()) {  // GatherUnits stages device memory
      first = absl::InternalError(absl::StrCat("unit ", unit.name, " reached the weight writer on ",
                                               flat.device().str(), ", not contiguous on the CPU"));
      return absl::OkStatus();
    }
    for (const ShardedParam& p : unit.params) {
      first = writer->Append(p.name, flat.data_ptr<float>() + p.offset, p.numel);
      if (!first.ok()) break;
    }
    return absl::OkStatus();
  }));
  return first;
}

absl::StatusOr<WorkReply> LmPolicyState::Announce() {
  const bool leader = comm_->rank() == 0;
  WorkReply reply;
  proto::WeightsReady* ready = reply.result.mutable_weights();
  ready->set_version(version_);
  ready->set_location(location_);
  ready->set_layout_hash(layout_hash_);
  ready->set_nbytes(manifest_.total_bytes());
  *ready->mutable_manifest() = manifest_;
  if (location_ != "inline") return reply;
  std::optional<TensorFrame> frame;
  std::optional<MemorySink> sink;
  std::optional<BucketWriter> writer;
  if (leader) {
    frame = TensorFrame::Allocate("weights", proto::U8,
                                  {static_cast<int64_t>(manifest_.total_bytes())});
    sink.emplace(manifest_, static_cast<char*>(frame->data()));
    writer.emplace(manifest_, *sink, version_);
  }
  RETURN_IF_ERROR(GatherInto(leader ? &*writer : nullptr));
  if (!leader) return reply;
  ASSIGN_OR_RETURN(std::vector<uint64_t> sums, writer->Finish());
  for (uint64_t c : sums) ready->add_bucket_checksums(c);
  reply.tensors.push_back(std::move(*frame));
  return reply;
}

absl::StatusOr<dist::Communicator*> LmPolicyState::WeightGroup(
    int readers, const std::string& group, const std::string& device,
    const std::function<void()>& dropped) {
  const std::string name = group.empty() ? kWeightGroup : group;
  if (weight_group_ != nullptr && name != weight_group_name_) {  // the engines changed
    dropped();
    weight_group_.reset();
  }
  if (weight_group_ == nullptr) {
    dist::GroupOptions g;
    g.store_address = store_address_;
    g.name = name;
    g.rank = 0;
    g.size = readers + 1;
    g.timeout_s = config_.weights.timeout_s;
    g.device = device;
    ASSIGN_OR_RETURN(weight_group_, dist::ConnectGroup(g));
    weight_group_name_ = name;
  }
  if (weight_group_->size() != readers + 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("the weight group formed with ", weight_group_->size() - 1, " engines; ",
                     readers, " asked to load now in the same group '", name, "'"));
  }
  return weight_group_.get();
}

absl::StatusOr<BucketSink*> LmPolicyState::Sink(const proto::PublishWeights& publish) {
  if (ring_ != nullptr) {
    RETURN_IF_ERROR(ring_->BeginPublication(
        publish.publication(), publish.readers(),
        std::vector<int>(publish.reader_pids().begin(), publish.reader_pids().end())));
    return ring_.get();
  }
  if (mapped_ != nullptr) return mapped_.get();  // every engine on the host may read it
  // The old sink drains its broadcasts before its group goes.
  ASSIGN_OR_RETURN(dist::Communicator * comm, WeightGroup(publish.readers(), publish.group(), "cpu",
                                                          [this] { broadcast_.reset(); }));
  if (broadcast_ == nullptr) {
    broadcast_ = std::make_unique<GlooBroadcastSink>(comm, manifest_.bucket_bytes());
  }
  return broadcast_.get();
}

absl::StatusOr<DeviceBucketSink*> LmPolicyState::DeviceSink(int readers, const std::string& group) {
  if (ipc_ != nullptr) return ipc_.get();  // every engine on the host may read it
  const torch::Device device = policy_->device();
  ASSIGN_OR_RETURN(dist::Communicator * comm, WeightGroup(readers, group, device.str(),
                                                          [this] { device_broadcast_.reset(); }));
  if (device_broadcast_ == nullptr) {
    device_broadcast_ =
        std::make_unique<DeviceBroadcastSink>(comm, manifest_.bucket_bytes(), device);
  }
  return device_broadcast_.get();
}

absl::Status LmPolicyState::GatherIntoDevice(DeviceBucketWriter* writer) {
  absl::Status first;
  RETURN_IF_ERROR(policy_->GatherUnits(
      [&](const ShardUnit& unit, const torch::Tensor& flat) {
        if (writer == nullptr || !first.ok()) return absl::OkStatus();
        for (const ShardedParam& p : unit.params) {
          first = writer->Append(p.name, flat.narrow(0, p.offset, p.numel));
          if (!first.ok()) break;
        }
        return absl::OkStatus();
      },
      ShardedModel::GatherTo::kDevice));
  return first;
}

absl::Status LmPolicyState::StreamDevice(DeviceBucketSink* sink) {
  std::optional<DeviceBucketWriter> writer;
  if (sink != nullptr) writer.emplace(manifest_, *sink, version_);
  RETURN_IF_ERROR(GatherIntoDevice(sink != nullptr ? &*writer : nullptr));
  return sink != nullptr ? writer->Finish() : absl::OkStatus();
}

absl::StatusOr<WorkReply> LmPolicyState::Stream(const proto::PublishWeights& publish) {
  if (location_ == "inline") {
    return absl::FailedPreconditionError(
        "publish_weights on the inline path (weights.transport: zmq): the step's reply carries "
        "the weights");
  }
  const Stopwatch timer;
  const bool leader = comm_->rank() == 0;
  const WeightTransport transport = ResolveWeightTransport(config_);
  const bool mapped =
      config_.weights.apply == WeightApply::kMapped && transport == WeightTransport::kShm;
  // The segment keeps a version in its slot until the version after next is written
  // (shm_mapped.h): new engines read it from there.
  const bool written = mapped && segment_version_ == version_;
  std::vector<uint64_t> sums;  // the device transports hash nothing (device_stream.h says why)
  if (written) {
    sums = segment_sums_;
  } else if (IsDeviceWeightTransport(transport)) {
    DeviceBucketSink* sink = nullptr;
    if (leader) {
      ASSIGN_OR_RETURN(sink, DeviceSink(publish.readers(), publish.group()));
    }
    RETURN_IF_ERROR(StreamDevice(sink));
  } else {
    std::optional<BucketWriter> writer;
    if (leader) {
      ASSIGN_OR_RETURN(BucketSink * sink, Sink(publish));
      writer.emplace(manifest_, *sink, version_);
    }
    RETURN_IF_ERROR(GatherInto(leader ? &*writer : nullptr));
    if (leader) {
      ASSIGN_OR_RETURN(sums, writer->Finish());
    }
    if (mapped) {
      segment_version_ = version_;
      segment_sums_ = sums;
    }
  }
  WorkReply reply;
  if (!leader) return reply;
  ASSIGN_OR_RETURN(reply, Announce());
  for (uint64_t c : sums) reply.result.mutable_weights()->add_bucket_checksums(c);
  auto& m = *reply.result.mutable_metrics();
  m["publish_s"] = timer.Seconds();
  m["weight_stream_bytes"] = written ? 0.0 : static_cast<double>(manifest_.total_bytes());
  return reply;
}

}  // namespace rlforge
