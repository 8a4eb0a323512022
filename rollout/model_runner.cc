#include "rollout/model_runner.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <cstring>
#include <stdexcept>

#include "common/exceptions.h"
#include "common/status.h"

namespace rlforge {

namespace {

// The kernel path's attention for one layer: the new k, v into the pools, then q over them.
// Runs inside the model's forward, so an error leaves as an exception for its CallCatching.
torch::Tensor KernelAttend(const kernel_ops::PagedIndex& index, torch::Tensor& k_pool,
                           torch::Tensor& v_pool, const torch::Tensor& q, const torch::Tensor& k,
                           const torch::Tensor& v, float scale) {
  const absl::Status written =
      kernel_ops::WriteKv(k.contiguous(), v.contiguous(), index.row_slot, k_pool, v_pool);
  if (!written.ok()) throw std::runtime_error(Msg(written));
  absl::StatusOr<torch::Tensor> out =
      kernel_ops::PagedAttention(q.contiguous(), k_pool, v_pool, index, scale);
  if (!out.ok()) throw std::runtime_error(Msg(out.status()));
  return *std::move(out);
}

}  // namespace

ModelRunner::ModelRunner(models::Transformer model, const ModelRunnerSettings& options)
    : model_(std::move(model)), options_(options), device_(torch::kCPU) {
  const std::vector<torch::Tensor> params = model_->parameters();
  if (!params.empty()) device_ = params.front().device();
  // The engine's own step is fp32 on the CPU; anything else goes through the kernel library.
  use_kernels_ = options.use_kernel_library || device_.is_cuda() ||
                 (!params.empty() && params.front().scalar_type() != torch::kFloat32);
  AllocatePools(params);
}

ModelRunner::~ModelRunner() = default;

void ModelRunner::AllocatePools(const std::vector<torch::Tensor>& params) {
  const auto& c = model_->config();
  torch::TensorOptions pool = torch::dtype(torch::kFloat32);
  if (use_kernels_ && !params.empty()) {
    pool = pool.dtype(params.front().scalar_type()).device(device_);
  }
  const bool graphs =
      use_kernels_ && (device_.is_cuda() ? options_.cuda_graphs : options_.pad_decode_steps_on_cpu);
  // Decode graphs' padding rows write into one more block, which the block manager never owns.
  const int64_t pool_blocks = options_.num_blocks + (graphs ? 1 : 0);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    // zero_() touches every page now: a lazily zeroed allocation would fault
    // its pages in during generation instead (~6% of a run).
    k_pool_.push_back(
        torch::empty({pool_blocks, options_.block_size, c.num_key_value_heads, c.head_dim}, pool)
            .zero_());
    v_pool_.push_back(torch::empty_like(k_pool_.back()).zero_());
  }
  if (graphs) {
    DecodeGraphOptions g;
    g.device = device_;
    g.max_batch = options_.max_batch;
    g.block_size = options_.block_size;
    g.scratch_block = static_cast<int32_t>(options_.num_blocks);
    // The scheduler bounds every sequence by both; a fork's gap adds less than a block.
    g.max_context = static_cast<int32_t>(
        std::min(c.max_position_embeddings, options_.num_blocks * options_.block_size));
    g.max_blocks = (g.max_context + 2 * options_.block_size - 2) / options_.block_size;
    graphs_ =
        std::make_unique<DecodeGraphs>(g, [this](const DeviceStep& in) { return KernelStep(in); });
    graphs_->ParametersMoved(params);  // where the graphs will read the weights
  }
}

void ModelRunner::ApplyBlockCopies(const std::vector<BlockCopy>& copies) {
  const auto& c = model_->config();
  // Copy-on-write: move shared partial blocks' KV before anything writes.
  const int64_t block_elems = options_.block_size * c.num_key_value_heads * c.head_dim;
  for (const BlockCopy& copy : copies) {
    const int64_t bytes = copy.num_tokens * c.num_key_value_heads * c.head_dim * sizeof(float);
    for (size_t l = 0; l < k_pool_.size(); ++l) {
      for (torch::Tensor* pool : {&k_pool_[l], &v_pool_[l]}) {
        if (use_kernels_) {  // any dtype, any device
          pool->select(0, copy.dst)
              .narrow(0, 0, copy.num_tokens)
              .copy_(pool->select(0, copy.src).narrow(0, 0, copy.num_tokens));
          continue;
        }
        float* base = pool->data_ptr<float>();
        std::memcpy(base + copy.dst * block_elems, base + copy.src * block_elems, bytes);
      }
    }
  }
}

// What one step feeds the model, and who draws from which of its logits rows.
struct ModelRunner::StepInputs {
  PagedBatch pb;
  std::vector<int64_t> tokens, positions;
  // Hidden rows whose logits the step computes, and per drawing sequence its logits row. The
  // kernel path gives every drawer a row of its own (a fork repeats its prompt's hidden row),
  // since the sampler kernel draws row i for drawer i; the own path computes each row once.
  std::vector<int64_t> logit_rows;
  std::vector<Sequence*> drawers;
  std::vector<int64_t> drawer_row;
};

ModelRunner::StepInputs ModelRunner::BuildStep(const ScheduledStep& step) const {
  StepInputs in;
  PagedBatch& pb = in.pb;
  pb.block_size = options_.block_size;
  pb.table_start.push_back(0);
  std::vector<int64_t> last_row(step.seqs.size());  // each entry's last hidden row
  for (size_t i = 0; i < step.seqs.size(); ++i) {
    const Sequence* s = step.seqs[i];
    for (int64_t p = step.start[i]; p < step.start[i] + step.chunk[i]; ++p) {
      in.tokens.push_back(s->tokens[p]);
      in.positions.push_back(p);
      pb.row_seq.push_back(static_cast<int32_t>(i));
      pb.row_context.push_back(static_cast<int32_t>(p + 1));
      const int64_t u = s->SlotIndex(p);
      pb.row_slot.push_back(static_cast<int64_t>(s->table[u / options_.block_size]) *
                                options_.block_size +
                            u % options_.block_size);
    }
    pb.tables.insert(pb.tables.end(), s->table.begin(), s->table.end());
    pb.table_start.push_back(static_cast<int32_t>(pb.tables.size()));
    pb.seq_skip_from.push_back(s->skip_from);
    pb.seq_skip.push_back(s->skip);
    last_row[i] = static_cast<int64_t>(in.tokens.size()) - 1;
  }
  for (size_t d = 0; d < step.drawers.size(); ++d) {
    const int64_t entry = step.drawer_entry[d];
    // The own path computes an entry's row once for all its drawers (a leader's samples).
    if (use_kernels_ || d == 0 || entry != step.drawer_entry[d - 1]) {
      in.logit_rows.push_back(last_row[entry]);
    }
    in.drawers.push_back(step.drawers[d]);
    in.drawer_row.push_back(static_cast<int64_t>(in.logit_rows.size()) - 1);
  }
  return in;
}

absl::StatusOr<std::vector<SampledToken>> ModelRunner::Run(const ScheduledStep& step) {
  ApplyBlockCopies(step.copies);
  const StepInputs in = BuildStep(step);
  std::vector<SampledToken> draws;
  RETURN_IF_ERROR(CallCatching(
      [&]() -> absl::Status {
        draws = Forward(in);
        return absl::OkStatus();
      },
      "engine: model forward failed: "));
  return draws;
}

void ModelRunner::WeightsChanged() {
  // The graphs read the parameters by address: the loaders copy into them, and should one
  // replace them instead, the graphs are dropped and captured again.
  if (graphs_) graphs_->ParametersMoved(model_->parameters());
}

std::vector<SampledToken> ModelRunner::Forward(const StepInputs& in) {
  torch::NoGradGuard no_grad;
  if (use_kernels_) return KernelForward(in);
  auto attend = [&](int64_t layer, const torch::Tensor& q, const torch::Tensor& k,
                    const torch::Tensor& v) {
    WritePagedKv(k_pool_[layer], k, in.pb);
    WritePagedKv(v_pool_[layer], v, in.pb);
    return PagedAttention(q, k_pool_[layer], v_pool_[layer], in.pb);
  };
  torch::Tensor hidden =
      model_->HiddenIncremental(torch::tensor(in.tokens, torch::kLong),
                                torch::tensor(in.positions, torch::kLong), attend, nullptr);
  if (in.drawers.empty()) return {};  // no sequence to sample: the step filled KV only
  torch::Tensor logits =
      model_->Logits(hidden.index_select(0, torch::tensor(in.logit_rows, torch::kLong)));
  return OwnDraws(logits.to(torch::kFloat32).contiguous(), in);
}

std::vector<SampledToken> ModelRunner::KernelForward(const StepInputs& in) {
  const int64_t rows = static_cast<int64_t>(in.tokens.size());
  const HostSampling sampling = SamplingOf(in, model_->config().vocab_size);
  // A decode step: every row draws once, from its own logits row (no fork shares one).
  bool decode = static_cast<int64_t>(in.logit_rows.size()) == rows;
  for (int64_t i = 0; decode && i < rows; ++i) decode = in.logit_rows[i] == i;
  if (decode && graphs_ && graphs_->Serves(in.pb, rows)) {
    absl::StatusOr<std::vector<SampledToken>> out =
        graphs_->Run(in.tokens, in.positions, in.pb, sampling);
    if (!out.ok()) throw std::runtime_error(Msg(out.status()));
    ++graph_steps_;
    return *std::move(out);
  }
  DeviceStep d;
  d.tokens = torch::tensor(in.tokens, torch::kLong).to(device_);
  d.positions = torch::tensor(in.positions, torch::kLong).to(device_);
  absl::StatusOr<kernel_ops::PagedIndex> index = kernel_ops::ToDevice(in.pb, device_);
  if (!index.ok()) throw std::runtime_error(Msg(index.status()));
  d.index = *std::move(index);
  d.logit_rows = torch::tensor(in.logit_rows, torch::kLong).to(device_);
  d.sampling = sampling.ToDevice(device_);
  const kernel_ops::SampledRows drawn = KernelStep(d);
  if (in.drawers.empty()) return {};  // no sequence to sample: the step filled KV only
  const torch::Tensor tokens = drawn.tokens.cpu(), logprobs = drawn.logprobs.cpu();
  std::vector<SampledToken> out(in.drawers.size());
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = {tokens.data_ptr<int32_t>()[i], logprobs.data_ptr<float>()[i]};
  }
  return out;
}

kernel_ops::SampledRows ModelRunner::KernelStep(const DeviceStep& in) {
  torch::NoGradGuard no_grad;
  const float scale = 1.0f / std::sqrt(static_cast<float>(model_->config().head_dim));
  auto attend = [&](int64_t layer, const torch::Tensor& q, const torch::Tensor& k,
                    const torch::Tensor& v) {
    return KernelAttend(in.index, k_pool_[layer], v_pool_[layer], q, k, v, scale);
  };
  static const models::TransformerImpl::IncrementalKernels kModelKernels =
      kernel_ops::ModelKernels();
  torch::Tensor hidden = model_->HiddenIncremental(in.tokens, in.positions, attend, &kModelKernels);
  if (in.logit_rows.defined()) {
    if (in.logit_rows.size(0) == 0) return {};  // a prefill-only step draws nothing
    hidden = hidden.index_select(0, in.logit_rows);
  }
  absl::StatusOr<kernel_ops::SampledRows> drawn =
      kernel_ops::Sample(model_->Logits(hidden).contiguous(), in.sampling);
  if (!drawn.ok()) throw std::runtime_error(Msg(drawn.status()));
  return *std::move(drawn);
}

HostSampling ModelRunner::SamplingOf(const StepInputs& in, int64_t vocab) const {
  HostSampling h;
  for (const Sequence* s : in.drawers) {
    const SamplingParams& p = s->group->request.params;
    h.temperature.push_back(static_cast<float>(p.temperature));
    h.top_k.push_back(static_cast<int32_t>(p.top_k > 0 && p.top_k < vocab ? p.top_k : 0));
    h.top_p.push_back(static_cast<float>(p.top_p));
    h.seeds.push_back(static_cast<int64_t>(SampleSeed(p.seed, s->index)));
    h.steps.push_back(static_cast<int64_t>(s->tokens.size()));  // the drawn token's position
  }
  return h;
}

std::vector<SampledToken> ModelRunner::OwnDraws(const torch::Tensor& logits, const StepInputs& in) {
  const int64_t vocab = logits.size(1);
  const float* lp = logits.data_ptr<float>();
  std::vector<SampledToken> out(in.drawers.size());
  // In parallel: each sequence owns its RNG.
  at::parallel_for(0, static_cast<int64_t>(out.size()), 8, [&](int64_t b, int64_t e) {
    std::vector<float> scratch;
    std::vector<int32_t> index_scratch;
    for (int64_t i = b; i < e; ++i) {
      Sequence* s = in.drawers[i];
      out[i] = SampleToken(lp + in.drawer_row[i] * vocab, vocab, s->group->request.params, s->rng,
                           scratch, index_scratch);
    }
  });
  return out;
}

}  // namespace rlforge
