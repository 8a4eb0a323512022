#include "rollout/lm_rollout_role.h"

#include <algorithm>
#include <unordered_map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/clock.h"
#include "common/exceptions.h"
#include "common/status.h"
#include "models/actor_critic.h"
#include "models/compute_threads.h"
#include "models/device.h"
#include "models/hf_checkpoint.h"
#include "proto/lm_groups.h"
#include "weights/weight_transport.h"

namespace rlforge {

EngineSettings EngineSettingsFor(const EngineOptions& o, const models::TransformerConfig& m) {
  EngineSettings s;
  s.block_size = o.block_size;
  s.max_batch = o.max_batch;
  s.max_tokens_per_step = o.max_tokens_per_step;
  s.prefix_sharing = o.prefix_sharing;
  s.cuda_graphs = o.cuda_graphs.value_or(true);  // on a cpu engine it has no effect
  s.num_blocks = o.num_blocks;
  if (s.num_blocks == 0) {
    const double block_bytes = 2.0 * m.num_hidden_layers * o.block_size * m.num_key_value_heads *
                               m.head_dim * sizeof(float);
    s.num_blocks =
        std::max<int64_t>(1, static_cast<int64_t>(o.kv_memory_mb * 1048576.0 / block_bytes));
  }
  return s;
}

absl::StatusOr<std::unique_ptr<Role>> LmRolloutRole::Create(const JobConfig& config,
                                                            const proto::Assignment& assignment,
                                                            const SetupProgress& progress) {
  if (config.model.path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.path: job.algorithm ", config.job.algorithm->name,
        " starts from a checkpoint (e.g. the SFT stage's runs/<name>/checkpoints/step_<N>)"));
  }
  std::unique_ptr<LmRolloutRole> role(new LmRolloutRole());
  role->config_ = &config;
  role->assignment_ = assignment;
  // In synchronous mode the engines generate at once while the trainer waits: they share the
  // host's cores (trainer.threads: 0) as the trainer ranks do.
  SetComputeThreads(config.trainer.threads, std::max(config.trainer.ranks, config.rollout.workers));
  RETURN_IF_ERROR(CallCatching([&]() -> absl::Status {
    ASSIGN_OR_RETURN(const torch::Device device,
                     models::TorchDevice("engine.device", config.engine.device, assignment.rank()));
    ASSIGN_OR_RETURN(role->tokenizer_, models::LoadTokenizer(config.model.path));
    ASSIGN_OR_RETURN(models::Transformer model,
                     models::LoadHfModel(config.model.path, torch::kFloat32, progress));
    model->eval();
    if (config.trainer.lora.rank > 0) {  // the stream carries adapters; served merged
      ASSIGN_OR_RETURN(role->lora_,
                       models::MergedLora::Create(model, models::LoraSpecOf(config.trainer.lora)));
    }
    // The engine follows its parameters: its KV pool goes there too, and on a GPU every step
    // runs through the CUDA kernels (llm_engine.cc).
    if (!device.is_cpu()) model->to(device);
    EngineSettings s = EngineSettingsFor(config.engine, model->config());
    s.weight_update = config.rollout.partial ? "recompute" : "drain";
    const models::Tokenizer* tok = role->tokenizer_.get();
    s.detokenize = [tok](const std::vector<int32_t>& ids) { return tok->Decode(ids); };
    role->layout_hash_ = LayoutHash(*model);
    // Over a host transport a GPU's parameters cannot be the stream's destination: it is read
    // into host memory, then copied to the device (in_place: while the engine pauses; staged:
    // before). The device transports need no host copy.
    if (!IsDeviceWeightTransport(ResolveWeightTransport(config)) &&
        (config.weights.apply == WeightApply::kStaged || !device.is_cpu())) {
      role->staged_.resize(static_cast<size_t>(FlatSize(*model)));
    }
    role->engine_ = std::make_unique<LlmEngine>(model, s, 0);
    return absl::OkStatus();
  }));
  return std::unique_ptr<Role>(std::move(role));
}

absl::StatusOr<WorkReply> LmRolloutRole::Handle(const proto::WorkRequest& request,
                                                std::vector<TensorFrame> tensors) {
  return CallCatching([&]() -> absl::StatusOr<WorkReply> {
    switch (request.task_case()) {
      case proto::WorkRequest::kLmGenerate:
        return Generate(request.lm_generate(), tensors);
      case proto::WorkRequest::kLoadWeights:
        return Load(request.load_weights(), tensors);
      default:
        return absl::InvalidArgumentError(
            "the LM rollout worker takes lm_generate and "
            "load_weights work");
    }
  });
}

absl::StatusOr<WorkReply> LmRolloutRole::Generate(const proto::LmGenerate& task,
                                                  const std::vector<TensorFrame>& tensors) {
  const Stopwatch timer;
  ASSIGN_OR_RETURN(std::vector<LmGroup> prompts, GroupsFromFrames(tensors, false, 0));
  for (const LmGroup& p : prompts) {
    GenerationRequest r;
    r.id = static_cast<uint64_t>(p.request_id);
    r.prompt = p.prompt;
    r.n = task.n();
    r.params.temperature = task.temperature();
    r.params.top_p = task.top_p();
    r.params.top_k = task.top_k();
    r.params.max_tokens = task.max_tokens();
    r.params.seed = RequestSeed(task.seed(), p.request_id);
    r.params.stop_token_ids = {tokenizer_->eos_id()};
    RETURN_IF_ERROR(engine_->Submit(std::move(r)));
  }
  const EngineStats before = engine_->stats();
  std::vector<LmGroup> done;
  auto collect = [&] {
    for (FinishedGroup& f : engine_->TakeFinished()) {
      LmGroup g;
      g.request_id = static_cast<int64_t>(f.request_id);
      g.prompt = std::move(f.prompt);
      for (GeneratedSample& s : f.samples) {
        LmSample out;
        out.tokens = std::move(s.tokens);
        out.logprobs = std::move(s.logprobs);
        out.versions = std::move(s.versions);
        out.stopped = s.finish_reason == "stop";
        g.samples.push_back(std::move(out));
      }
      done.push_back(std::move(g));
    }
  };
  // Groups a weight load's drain finished since the last request first: with nothing left
  // unfinished they would otherwise never be returned.
  collect();
  while (engine_->HasUnfinished() && static_cast<int64_t>(done.size()) < task.min_groups()) {
    RETURN_IF_ERROR(engine_->Step());
    collect();
  }
  const EngineStats& after = engine_->stats();
  WorkReply reply;
  reply.tensors = GroupsToFrames(done, true);
  auto& m = *reply.result.mutable_metrics();
  m["generate_s"] = timer.Seconds();
  m["generated_tokens"] = static_cast<double>(after.generated_tokens - before.generated_tokens);
  m["engine_steps"] = static_cast<double>(after.steps - before.steps);
  m["preemptions"] = static_cast<double>(after.preemptions - before.preemptions);
  m["in_flight"] = engine_->HasUnfinished() ? 1 : 0;
  return reply;
}

std::vector<Destination> ParameterDestinations(torch::nn::Module& model, float* staged) {
  std::vector<Destination> out;
  for (const auto& p : model.named_parameters()) {
    torch::Tensor t = p.value();
    RF_CHECK(staged != nullptr || t.is_cpu());
    out.push_back({p.key(), t.sizes().vec(), staged != nullptr ? staged : t.data_ptr<float>()});
    if (staged != nullptr) staged += t.numel();
  }
  return out;
}

void PointParametersAt(torch::nn::Module& model, const proto::WeightManifest& m, const char* base) {
  std::unordered_map<std::string, uint64_t> offset;
  for (const proto::WeightTensor& t : m.tensors()) offset[t.name()] = t.offset();
  for (const auto& p : model.named_parameters()) {
    torch::Tensor t = p.value();
    // set_data swaps the storage under every handle to the parameter (a layer's, a tied head's).
    t.set_data(
        torch::from_blob(const_cast<char*>(base + offset.at(p.key())), t.sizes(), torch::kFloat32));
  }
}

absl::StatusOr<BucketSource*> LmRolloutRole::SourceFor(const proto::LoadWeights& load,
                                                       const std::vector<TensorFrame>& tensors) {
  const proto::WeightsReady& w = load.weights();
  const std::string& where = w.location();
  const double timeout = config_->weights.timeout_s;
  if (where == "inline") {
    const TensorFrame* f = FindFrame(tensors, "weights");
    if (f == nullptr || f->nbytes() != w.manifest().total_bytes()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "inline weights missing or of the wrong size (", f == nullptr ? 0 : f->nbytes(),
          " bytes, the manifest says ", w.manifest().total_bytes(), ")"));
    }
    inline_sums_.assign(w.bucket_checksums().begin(), w.bucket_checksums().end());
    inline_ = std::make_unique<MemorySource>(w.manifest(), static_cast<const char*>(f->data()),
                                             inline_sums_);
    return inline_.get();
  }
  if (absl::StartsWith(where, "shm-ring:")) {
    if (ring_ == nullptr) {
      ASSIGN_OR_RETURN(ring_, ShmRingSource::Open(where, timeout));
    }
    ring_->set_publication(load.publication(), load.reader());
    return ring_.get();
  }
  if (absl::StartsWith(where, "gloo:")) {
    ASSIGN_OR_RETURN(dist::Communicator * comm,
                     WeightGroup(load, where.substr(5), "cpu", [this] { broadcast_.reset(); }));
    if (broadcast_ == nullptr) {
      broadcast_ = std::make_unique<GlooBroadcastSource>(comm, w.manifest().bucket_bytes());
    }
    if (broadcast_->bucket_bytes() != w.manifest().bucket_bytes()) {
      return absl::FailedPreconditionError("the weight stream's bucket size changed");
    }
    return broadcast_.get();
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown weight location '", where, "'"));
}

absl::StatusOr<dist::Communicator*> LmRolloutRole::WeightGroup(
    const proto::LoadWeights& load, const std::string& group, const std::string& device,
    const std::function<void()>& dropped) {
  if (weight_group_ != nullptr && group != weight_group_name_) {  // the engines changed
    dropped();
    weight_group_.reset();
  }
  if (weight_group_ == nullptr) {
    dist::GroupOptions g;
    g.store_address = assignment_.store_address();
    g.name = group;
    g.rank = load.group_rank() > 0 ? load.group_rank() : assignment_.rank() + 1;
    g.size =
        load.group_size() > 0 ? load.group_size() : static_cast<int>(config_->rollout.workers) + 1;
    g.timeout_s = config_->weights.timeout_s;
    g.device = device;
    ASSIGN_OR_RETURN(weight_group_, dist::ConnectGroup(g));
    weight_group_name_ = group;
  }
  return weight_group_.get();
}

bool OnDeviceLocation(const std::string& location) {
  return absl::StartsWith(location, kCudaIpcPrefix) || absl::StartsWith(location, "nccl:");
}

absl::StatusOr<DeviceBucketSource*> LmRolloutRole::DeviceSourceFor(const proto::LoadWeights& load) {
  const proto::WeightsReady& w = load.weights();
  const std::string& where = w.location();
  const torch::Device device = engine_->model()->parameters().front().device();
  if (absl::StartsWith(where, kCudaIpcPrefix)) {
    if (ipc_ == nullptr || ipc_->location() != where) {  // a new trainer exports anew
      ipc_.reset();
      ASSIGN_OR_RETURN(
          ipc_, CudaIpcSource::Open(where, w.manifest(), device, config_->weights.timeout_s));
    }
    return ipc_.get();
  }
  ASSIGN_OR_RETURN(dist::Communicator * comm, WeightGroup(load, where.substr(5), device.str(),
                                                          [this] { device_broadcast_.reset(); }));
  if (device_broadcast_ == nullptr ||
      device_broadcast_->bucket_bytes() != w.manifest().bucket_bytes()) {
    device_broadcast_.reset();
    device_broadcast_ =
        std::make_unique<DeviceBroadcastSource>(comm, w.manifest().bucket_bytes(), device);
  }
  return device_broadcast_.get();
}

namespace {

std::vector<std::pair<std::string, torch::Tensor>> NamedParameters(torch::nn::Module& model) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& p : model.named_parameters()) out.push_back({p.key(), p.value()});
  return out;
}

}  // namespace

absl::Status LmRolloutRole::LoadOnDevice(const proto::LoadWeights& load, ReadStats* stats) {
  const proto::WeightsReady& w = load.weights();
  const std::string& who = assignment_.actor_id();
  ASSIGN_OR_RETURN(DeviceBucketSource * source, DeviceSourceFor(load));
  if (config_->weights.apply == WeightApply::kStaged) {
    torch::NoGradGuard ng;
    if (device_staged_.empty()) {  // a device copy of the parameters, kept for every version
      for (const auto& p : engine_->model()->parameters()) device_staged_.push_back(p.clone());
    }
    std::vector<std::pair<std::string, torch::Tensor>> named = NamedParameters(*engine_->model());
    for (size_t i = 0; i < named.size(); ++i) named[i].second = device_staged_[i];
    ASSIGN_OR_RETURN(std::vector<torch::Tensor> dest,
                     MatchDeviceDestinations(w.manifest(), named, who));
    // Whole, and (cuda_ipc) its slot not rewritten meanwhile, before the engine sees it.
    ASSIGN_OR_RETURN(*stats, ReadDeviceVersion(w.manifest(), w.version(), *source, dest, who));
    engine_->RequestWeightUpdate(
        [this](models::Transformer& model) {
          torch::NoGradGuard ng;
          const std::vector<torch::Tensor> params = model->parameters();
          for (size_t i = 0; i < params.size(); ++i) params[i].copy_(device_staged_[i]);
          return absl::OkStatus();
        },
        w.version());
    return absl::OkStatus();
  }
  // Applied by the engine between steps, before Load returns (it steps until then).
  engine_->RequestWeightUpdate(
      [source, stats, manifest = &w.manifest(), version = w.version(),
       who](models::Transformer& model) -> absl::Status {
        torch::NoGradGuard ng;
        ASSIGN_OR_RETURN(std::vector<torch::Tensor> dest,
                         MatchDeviceDestinations(*manifest, NamedParameters(*model), who));
        ASSIGN_OR_RETURN(*stats, ReadDeviceVersion(*manifest, version, *source, dest, who));
        return absl::OkStatus();
      },
      w.version());
  return absl::OkStatus();
}

absl::StatusOr<ReadStats> LmRolloutRole::ReadInto(const proto::WeightsReady& w,
                                                  BucketSource& source,
                                                  std::vector<Destination> targets) {
  const std::string& who = assignment_.actor_id();
  ASSIGN_OR_RETURN(std::vector<float*> dest, MatchDestinations(w.manifest(), targets, who));
  return ReadVersion(w.manifest(), w.version(), source, dest, who);
}

absl::StatusOr<ReadStats> LmRolloutRole::LoadMapped(const proto::WeightsReady& w) {
  const std::string& who = assignment_.actor_id();
  const std::string& where = w.location();
  if (mapped_ == nullptr) {
    ASSIGN_OR_RETURN(mapped_, MappedSource::Open(where, who, config_->weights.timeout_s));
    mapped_location_ = where;
  } else if (where != mapped_location_) {
    // The parameters point into the first segment: it cannot be let go of.
    return absl::FailedPreconditionError(
        absl::StrCat(who, " serves from ", mapped_location_, " and was asked to load version ",
                     w.version(), " from ", where, " (a new trainer needs new engines)"));
  }
  // Names and shapes first: another model's manifest is refused before any wait.
  RETURN_IF_ERROR(
      MatchDestinations(w.manifest(), ParameterDestinations(*engine_->model()), who).status());
  ReadStats stats;
  ASSIGN_OR_RETURN(const char* base, mapped_->Check(w.manifest(), w.version(), &stats));
  RETURN_IF_ERROR(mapped_->Hold(w.version()));
  const int64_t version = w.version();
  engine_->RequestWeightUpdate(
      [this, manifest = w.manifest(), base, version](models::Transformer& model) {
        PointParametersAt(*model, manifest, base);
        mapped_->Serve(version);  // the previous version's slot is free for the publisher
        return absl::OkStatus();
      },
      version);
  return stats;
}

absl::Status LmRolloutRole::ReadAdapters(const proto::WeightsReady& w, BucketSource& source,
                                         models::Transformer& model, ReadStats* stats) {
  std::vector<Destination> adapters;
  for (Destination& d : ParameterDestinations(*model)) {
    if (models::IsLoraParameter(d.name)) adapters.push_back(std::move(d));
  }
  ASSIGN_OR_RETURN(*stats, ReadInto(w, source, adapters));
  lora_->Merge();
  return absl::OkStatus();
}

absl::StatusOr<WorkReply> LmRolloutRole::Load(const proto::LoadWeights& load,
                                              const std::vector<TensorFrame>& tensors) {
  const Stopwatch timer;
  const proto::WeightsReady& w = load.weights();
  if (w.layout_hash() != layout_hash_) {
    return absl::FailedPreconditionError(
        absl::StrCat(assignment_.actor_id(), ": weight version ", w.version(),
                     " is for another model layout (trainer and rollout configs differ)"));
  }
  ReadStats stats;
  if (OnDeviceLocation(w.location())) {
    RETURN_IF_ERROR(LoadOnDevice(load, &stats));
  } else if (config_->weights.apply == WeightApply::kMapped) {
    // Whole and verified in the segment before the engine sees it, like staged.
    ASSIGN_OR_RETURN(stats, LoadMapped(w));
  } else if (config_->weights.apply == WeightApply::kStaged) {
    ASSIGN_OR_RETURN(BucketSource * source, SourceFor(load, tensors));
    // Whole and verified before the engine sees it: a failure leaves the previous version.
    ASSIGN_OR_RETURN(
        stats, ReadInto(w, *source, ParameterDestinations(*engine_->model(), staged_.data())));
    engine_->RequestWeightUpdate(
        [this](models::Transformer& model) {
          LoadFlat(*model, staged_.data());
          return absl::OkStatus();
        },
        w.version());
  } else {
    ASSIGN_OR_RETURN(BucketSource * source, SourceFor(load, tensors));
    float* host = staged_.empty() ? nullptr : staged_.data();  // a GPU engine's
    engine_->RequestWeightUpdate(
        [&, source, host](models::Transformer& model) -> absl::Status {
          if (lora_ != nullptr) return ReadAdapters(w, *source, model, &stats);
          ASSIGN_OR_RETURN(stats, ReadInto(w, *source, ParameterDestinations(*model, host)));
          if (host != nullptr) LoadFlat(*model, host);
          return absl::OkStatus();
        },
        w.version());
  }
  // Between steps: an idle engine applies it at once; a draining one finishes its started
  // groups on the old weights first (they stay queued for the next lm_generate).
  while (engine_->weight_update_pending()) {
    absl::Status s = engine_->Step();
    if (!s.ok() && config_->weights.apply == WeightApply::kInPlace && !engine_->torn().empty()) {
      return absl::Status(s.code(), absl::StrCat(s.message(), "; ", assignment_.actor_id(),
                                                 "'s weights are torn (weights.apply: in_place): "
                                                 "it serves nothing until a whole version loads"));
    }
    RETURN_IF_ERROR(s);
  }
  WorkReply reply;
  auto& m = *reply.result.mutable_metrics();
  m["load_s"] = timer.Seconds();
  m["weight_read_s"] = stats.seconds;
  m["weight_bytes"] = static_cast<double>(stats.bytes);
  m["weight_gbps"] = stats.gb_per_s();
  return reply;
}

}  // namespace rlforge
