#include "trainer/sharded_model.h"

#include <stdexcept>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/exceptions.h"
#include "common/status.h"

namespace rlforge {
namespace {

// Frees a tensor's memory but keeps its storage object, so every view of it (the module's
// parameters, tensors autograd saved for backward) sees the values again once AllocStorage
// refills it. Writes go through data pointers, so no version counter moves.
void FreeStorage(const torch::Tensor& t) {
  c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
  impl->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
  impl->set_nbytes(0);
}

void AllocStorage(const torch::Tensor& t, int64_t nbytes) {
  c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
  impl->set_data_ptr_noswap(impl->allocator()->allocate(static_cast<size_t>(nbytes)));
  impl->set_nbytes(static_cast<size_t>(nbytes));
}

int64_t StorageBytes(const torch::Tensor& t) {
  return t.defined() ? static_cast<int64_t>(t.storage().nbytes()) : 0;
}

// "model.layers.<i>.<rest>" -> i; -1 for the embedding and head parameters.
int64_t LayerOf(const std::string& name) {
  static const std::string kPrefix = "model.layers.";
  if (!absl::StartsWith(name, kPrefix)) return -1;
  const size_t dot = name.find('.', kPrefix.size());
  int64_t i = -1;
  if (!absl::SimpleAtoi(name.substr(kPrefix.size(), dot - kPrefix.size()), &i)) return -1;
  return i;
}

}  // namespace

struct ShardedModel::UnitState {
  std::vector<torch::Tensor> params;  // the module's parameters of this unit, in layout order
  torch::Tensor full;                 // [padded] compute dtype; no memory while not gathered
  bool gathered = false;              // memory allocated, all-gather issued or done
  std::unique_ptr<dist::Pending> gathering;
  bool reduced = false;  // this pass's gradients reduce-scattered
  // The reduce-scatter in flight: its input and output live until it is waited.
  torch::Tensor grad_full, grad_part;
  std::unique_ptr<dist::Pending> reducing;
};

ShardedModel::ShardedModel(models::Transformer model, dist::Communicator* comm, Options options)
    : model_(std::move(model)), comm_(comm), options_(options) {}

ShardedModel::~ShardedModel() {
  model_->set_layer_hooks({});
  (void)WaitAll();
}

absl::StatusOr<std::unique_ptr<ShardedModel>> ShardedModel::Create(models::Transformer model,
                                                                   dist::Communicator* comm,
                                                                   Options options) {
  // Shards, gathered units and gradients go to the collectives as they are: they must live
  // where the group's tensors do (a group of one moves nothing, so any device serves).
  if (comm->size() > 1 && options.device != comm->device()) {
    return absl::InvalidArgumentError(
        absl::StrCat("sharded model on ", options.device.str(), ", but its group of ", comm->size(),
                     " ranks holds tensors on ", comm->device().str()));
  }
  std::unique_ptr<ShardedModel> m(new ShardedModel(std::move(model), comm, options));
  RETURN_IF_ERROR(CallCatching([&] { return m->Build(); }));
  return m;
}

absl::Status ShardedModel::Build() {
  const int64_t n = comm_->size(), rank = comm_->rank();
  const int64_t layers = model_->config().num_hidden_layers;
  tied_ = model_->config().tie_word_embeddings;
  // Units in module order (embedding, layers, head), so one rank's shard buffer is laid out
  // as the unsharded trainer's flat buffer and its arithmetic (the gradient norm's sum) is
  // the same to the bit.
  units_.resize(static_cast<size_t>(layers) + 2);
  state_.clear();
  for (size_t u = 0; u < units_.size(); ++u) {
    units_[u].name = u == 0                             ? "embed"
                     : u <= static_cast<size_t>(layers) ? absl::StrCat("layer ", u - 1)
                                                        : "head";
    state_.push_back(std::make_unique<UnitState>());
  }
  for (auto& item : model_->named_parameters(/*recurse=*/true)) {
    if (options_.frozen && options_.frozen(item.key())) {
      torch::NoGradGuard ng;
      item.value().set_data(item.value().to(options_.device));
      item.value().set_requires_grad(false);
      continue;
    }
    const int64_t layer = LayerOf(item.key());
    if (layer >= layers) return absl::InternalError(absl::StrCat("parameter ", item.key()));
    const bool embed = absl::StartsWith(item.key(), "model.embed_tokens.");
    const size_t u = layer >= 0 ? LayerUnit(layer) : (embed ? 0 : units_.size() - 1);
    ShardUnit& unit = units_[u];
    ShardedParam p{item.key(), item.value().sizes().vec(), unit.numel, item.value().numel()};
    unit.numel += p.numel;
    unit.params.push_back(std::move(p));
    state_[u]->params.push_back(item.value());
  }
  int64_t total = 0;
  for (ShardUnit& unit : units_) {
    unit.padded = (unit.numel + n - 1) / n * n;
    shard_offsets_.push_back(total);
    total += unit.padded / n;
  }
  torch::NoGradGuard ng;
  // The module was built on the CPU: its values are copied into shards on the device.
  shard_data_ = torch::zeros({total}, torch::device(options_.device));
  shard_grad_ = torch::zeros({total}, torch::device(options_.device));
  const bool keep = resident();
  for (size_t u = 0; u < units_.size(); ++u) {
    const ShardUnit& unit = units_[u];
    UnitState& s = *state_[u];
    const int64_t k = unit.padded / n;
    torch::Tensor flat = torch::zeros({unit.padded});
    for (size_t i = 0; i < s.params.size(); ++i) {
      flat.narrow(0, unit.params[i].offset, unit.params[i].numel).copy_(s.params[i].reshape(-1));
    }
    shard_data_.narrow(0, shard_offsets_[u], k).copy_(flat.narrow(0, rank * k, k));
    if (!keep) s.full = torch::empty({unit.padded}, ComputeOptions());
    for (size_t i = 0; i < s.params.size(); ++i) {
      const ShardedParam& p = unit.params[i];
      torch::Tensor& param = s.params[i];
      if (keep) {  // one rank: the parameters live in the shard buffer, as FlatAdamW's
        param.set_data(shard_data_.narrow(0, shard_offsets_[u] + p.offset, p.numel).view(p.shape));
        if (options_.trainable) {
          param.mutable_grad() =
              shard_grad_.narrow(0, shard_offsets_[u] + p.offset, p.numel).view(p.shape);
        }
      } else {
        param.set_data(s.full.narrow(0, p.offset, p.numel).view(p.shape));
      }
      param.set_requires_grad(options_.trainable);
    }
    if (!keep) FreeStorage(s.full);
  }
  models::TransformerImpl::LayerHooks hooks;
  hooks.before = [this](int64_t layer) { BeforeLayer(layer); };
  hooks.after = [this](int64_t layer, const torch::Tensor& out) { return AfterLayer(layer, out); };
  model_->set_layer_hooks(std::move(hooks));
  return absl::OkStatus();
}

void ShardedModel::ZeroGrad() { shard_grad_.zero_(); }

void ShardedModel::Gather(size_t u) {
  UnitState& s = *state_[u];
  if (resident() || s.gathered) return;
  const ShardUnit& unit = units_[u];
  const int64_t k = unit.padded / comm_->size();
  AllocStorage(s.full, unit.padded * static_cast<int64_t>(s.full.element_size()));
  torch::Tensor mine = shard_data_.narrow(0, shard_offsets_[u], k);
  if (options_.compute_dtype != torch::kFloat32) mine = mine.to(options_.compute_dtype);
  // `mine` may be a temporary: the collective reads it before anything queued later (on the
  // host, or on the GPU's default stream) can reuse its memory.
  s.gathering = comm_->AllGather(mine, s.full);
  s.gathered = true;
}

void ShardedModel::WaitGathered(size_t u) {
  UnitState& s = *state_[u];
  if (!s.gathering) return;
  absl::Status st = s.gathering->Wait();
  s.gathering.reset();
  if (!st.ok()) {
    if (error_.ok()) error_ = st;
    throw std::runtime_error(absl::StrCat("gathering ", units_[u].name, ": ", st.message()));
  }
}

void ShardedModel::Free(size_t u) {
  UnitState& s = *state_[u];
  if (resident() || !s.gathered) return;
  FinishGather(u);  // never free memory a collective still writes
  FreeStorage(s.full);
  s.gathered = false;
}

void ShardedModel::BeginForward() {
  Gather(0);
  if (options_.prefetch && units_.size() > 1) Gather(1);
  WaitGathered(0);
  // Tied, the embedding is the lm_head too: held until FinishBackward, its gradients start
  // with the loss's backward.
  if (tied_ && torch::GradMode::is_enabled()) PrepareGrads(0);
}

void ShardedModel::BeforeLayer(int64_t layer) {
  const size_t u = LayerUnit(layer);
  Gather(u);
  if (options_.prefetch && u + 1 < units_.size()) Gather(u + 1);  // the head after the last
  WaitGathered(u);
  // The embedding is looked up; its backward needs only the token ids.
  if (layer == 0 && !tied_) Free(0);
}

torch::Tensor ShardedModel::AfterLayer(int64_t layer, const torch::Tensor& out) {
  const size_t u = LayerUnit(layer);
  const bool last = u + 2 == units_.size();
  if (last) {  // the final norm and lm_head come next
    Gather(units_.size() - 1);
    WaitGathered(units_.size() - 1);
  }
  const bool backward = options_.trainable && torch::GradMode::is_enabled() && out.requires_grad();
  if (!backward || options_.reshard_after_forward) Free(u);
  if (!backward || resident()) return out;
  if (last) PrepareGrads(units_.size() - 1);  // the head's backward comes first
  // Runs when the gradient of this layer's output is complete: the unit after it (the
  // next layer, or the head) has finished its backward and this layer's starts.
  out.register_hook([this, u](const torch::Tensor&) {
    Gather(u);
    if (options_.prefetch && u > 1) Gather(u - 1);
    WaitGathered(u);
    PrepareGrads(u);
    if (u == 1 && !tied_) PrepareGrads(0);  // the embedding's backward follows layer 0's
    if (u + 1 < units_.size()) {
      ReduceGrads(u + 1);
      Free(u + 1);
    }
  });
  return out;
}

void ShardedModel::PrepareGrads(size_t u) {
  UnitState& s = *state_[u];
  if (resident() || !options_.trainable || s.grad_full.defined()) return;
  const ShardUnit& unit = units_[u];
  s.grad_full = torch::zeros({unit.padded}, ComputeOptions());
  for (size_t i = 0; i < s.params.size(); ++i) {
    const ShardedParam& p = unit.params[i];
    // Backward accumulates in place into a defined gradient: straight into the flat buffer
    // the reduce-scatter sends.
    s.params[i].mutable_grad() = s.grad_full.narrow(0, p.offset, p.numel).view(p.shape);
  }
}

void ShardedModel::ReduceGrads(size_t u) {
  UnitState& s = *state_[u];
  if (resident() || s.reduced || !options_.trainable) return;
  // One reduction in flight: finish the earlier ones.
  for (size_t v = 0; v < state_.size(); ++v) FinishReduce(v);
  const ShardUnit& unit = units_[u];
  if (!s.grad_full.defined()) {  // gradients autograd allocated (no PrepareGrads this pass)
    s.grad_full = torch::zeros({unit.padded}, ComputeOptions());
    for (size_t i = 0; i < s.params.size(); ++i) {
      const torch::Tensor& g = s.params[i].grad();
      if (g.defined()) {
        s.grad_full.narrow(0, unit.params[i].offset, unit.params[i].numel).copy_(g.reshape(-1));
      }
    }
  }
  for (auto& p : s.params) p.mutable_grad().reset();
  if (s.grad_full.scalar_type() != torch::kFloat32) s.grad_full = s.grad_full.to(torch::kFloat32);
  s.grad_part = torch::empty({unit.padded / comm_->size()}, shard_grad_.options());
  s.reducing = comm_->ReduceScatter(s.grad_full, s.grad_part);
  s.reduced = true;
}

void ShardedModel::FinishGather(size_t u) {
  UnitState& s = *state_[u];
  if (!s.gathering) return;
  absl::Status st = s.gathering->Wait();
  s.gathering.reset();
  if (!st.ok() && error_.ok()) error_ = st;
}

void ShardedModel::FinishReduce(size_t u) {
  UnitState& s = *state_[u];
  if (!s.reducing) return;
  absl::Status st = s.reducing->Wait();
  s.reducing.reset();
  if (st.ok()) {
    shard_grad_.narrow(0, shard_offsets_[u], s.grad_part.numel()).add_(s.grad_part);
  } else if (error_.ok()) {
    error_ = st;
  }
  s.grad_full = s.grad_part = torch::Tensor();
}

absl::Status ShardedModel::WaitAll() {
  for (size_t u = 0; u < state_.size(); ++u) {
    FinishGather(u);
    FinishReduce(u);
  }
  return error_;
}

absl::Status ShardedModel::EndForward() {
  return CallCatching([&]() -> absl::Status {
    RETURN_IF_ERROR(WaitAll());
    for (size_t u = 0; u < units_.size(); ++u) Free(u);
    return error_;
  });
}

absl::Status ShardedModel::FinishBackward() {
  return CallCatching([&]() -> absl::Status {
    torch::NoGradGuard ng;
    for (size_t u = units_.size(); u-- > 0;) ReduceGrads(u);
    RETURN_IF_ERROR(WaitAll());
    for (size_t u = 0; u < units_.size(); ++u) {
      Free(u);
      state_[u]->reduced = false;
    }
    return error_;
  });
}

absl::Status ShardedModel::GatherUnits(
    const std::function<absl::Status(const ShardUnit&, const torch::Tensor&)>& sink, GatherTo to) {
  return CallCatching([&]() -> absl::Status {
    torch::NoGradGuard ng;
    for (size_t u = 0; u < units_.size(); ++u) {
      const ShardUnit& unit = units_[u];
      const int64_t k = unit.padded / comm_->size();
      torch::Tensor mine = shard_data_.narrow(0, shard_offsets_[u], k);
      torch::Tensor full = mine;
      if (!resident()) {
        full = torch::empty({unit.padded}, shard_data_.options());
        RETURN_IF_ERROR(comm_->AllGather(mine, full)->Wait());
      }
      torch::Tensor values = full.narrow(0, 0, unit.numel);
      // Raw-pointer sinks read host memory: device memory comes to the CPU first.
      if (to == GatherTo::kCpu) values = values.to(torch::kCPU);
      RETURN_IF_ERROR(sink(unit, values));
    }
    return absl::OkStatus();
  });
}

int64_t ShardedModel::HeldBytes() const {
  int64_t bytes = StorageBytes(shard_data_) + StorageBytes(shard_grad_);
  for (const auto& s : state_) {
    if (resident()) continue;
    bytes += StorageBytes(s->full) + StorageBytes(s->grad_full);
    for (const auto& p : s->params) {  // gradients autograd allocated itself
      if (!s->grad_full.defined() && p.grad().defined()) bytes += StorageBytes(p.grad());
    }
  }
  return bytes;
}

}  // namespace rlforge
