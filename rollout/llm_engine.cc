#include "rollout/llm_engine.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/exceptions.h"
#include "common/status.h"
#include "rollout/kernel_ops.h"
#include "rollout/paged_attention.h"

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

struct LlmEngine::Group {
  GenerationRequest request;
  std::vector<std::unique_ptr<Sequence>> seqs;
  std::vector<GeneratedSample> done;
  int64_t remaining = 0;
  bool started = false;
};

struct LlmEngine::Sequence {
  Group* group = nullptr;
  int64_t index = 0;            // -1: the leader that prefills a shared prompt once
  std::vector<int32_t> tokens;  // prompt + generated
  int64_t prompt_len = 0;
  int64_t computed = 0;  // leading tokens whose KV is in the pool
  std::vector<int32_t> table;
  // Slot of token position p: p, or p + skip from position skip_from on. A
  // sample forked from a shared prompt starts its own tokens at the next block
  // boundary, so the prompt's last partial block stays shared, never copied.
  int64_t skip_from = INT64_MAX, skip = 0;
  // Slot index of position p, and the slots the first n tokens take (a fork's
  // gap counts as taken, so the shared block is never written or copied).
  int64_t SlotIndex(int64_t p) const { return p < skip_from ? p : p + skip; }
  int64_t Slots(int64_t n) const { return n < skip_from ? n : n + skip; }
  std::mt19937_64 rng;
  GeneratedSample out;
  bool finished = false;
};

struct LlmEngine::PendingUpdate {
  std::function<absl::Status(models::Transformer&)> apply;
  int64_t version = 0;
};

LlmEngine::LlmEngine(models::Transformer model, const EngineSettings& options,
                     int64_t policy_version)
    : model_(std::move(model)),
      options_(options),
      version_(policy_version),
      blocks_(options.num_blocks, options.block_size),
      device_(torch::kCPU) {
  const auto& c = model_->config();
  torch::TensorOptions pool = torch::dtype(torch::kFloat32);
  const std::vector<torch::Tensor> params = model_->parameters();
  if (!params.empty()) device_ = params.front().device();
  // The engine's own step is fp32 on the CPU; anything else goes through the kernel library.
  use_kernels_ = options.use_kernel_library || device_.is_cuda() ||
                 (!params.empty() && params.front().scalar_type() != torch::kFloat32);
  if (use_kernels_ && !params.empty()) {
    pool = pool.dtype(params.front().scalar_type()).device(device_);
  }
  const bool graphs =
      use_kernels_ && (device_.is_cuda() ? options.cuda_graphs : options.pad_decode_steps_on_cpu);
  // Decode graphs' padding rows write into one more block, which the block manager never owns.
  const int64_t pool_blocks = options.num_blocks + (graphs ? 1 : 0);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    // zero_() touches every page now: a lazily zeroed allocation would fault
    // its pages in during generation instead (~6% of a run).
    k_pool_.push_back(
        torch::empty({pool_blocks, options.block_size, c.num_key_value_heads, c.head_dim}, pool)
            .zero_());
    v_pool_.push_back(torch::empty_like(k_pool_.back()).zero_());
  }
  if (graphs) {
    DecodeGraphOptions g;
    g.device = device_;
    g.max_batch = options.max_batch;
    g.block_size = options.block_size;
    g.scratch_block = static_cast<int32_t>(options.num_blocks);
    // CheckRequest bounds every sequence by both; a fork's gap adds less than a block.
    g.max_context = static_cast<int32_t>(
        std::min(c.max_position_embeddings, options.num_blocks * options.block_size));
    g.max_blocks = (g.max_context + 2 * options.block_size - 2) / options.block_size;
    graphs_ =
        std::make_unique<DecodeGraphs>(g, [this](const DeviceStep& in) { return KernelStep(in); });
    graphs_->ParametersMoved(params);  // where the graphs will read the weights
  }
}

LlmEngine::~LlmEngine() = default;

absl::Status LlmEngine::CheckRequest(const GenerationRequest& request) const {
  const auto& c = model_->config();
  const int64_t len = static_cast<int64_t>(request.prompt.size());
  const std::string where = absl::StrCat("generation request ", request.id);
  if (len == 0) return absl::InvalidArgumentError(absl::StrCat(where, ": empty prompt"));
  for (int64_t i = 0; i < len; ++i) {
    int32_t t = request.prompt[i];
    if (t < 0 || t >= c.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": prompt token ", i, " is ", t,
                                                     ", outside the vocabulary [0, ", c.vocab_size,
                                                     ")"));
    }
  }
  if (request.n < 1 || request.n > options_.max_batch) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": n = ", request.n,
                     " must be in [1, engine.max_batch = ", options_.max_batch, "]"));
  }
  if (request.params.max_tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": max_tokens must be positive"));
  }
  const int64_t total = len + request.params.max_tokens;
  if (blocks_.BlocksFor(total) > blocks_.num_blocks()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": prompt (", len, ") + max_tokens (", request.params.max_tokens, ") needs ",
        blocks_.BlocksFor(total), " KV blocks; the pool has ", blocks_.num_blocks()));
  }
  if (total > c.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": prompt + max_tokens = ", total,
                                                   " exceeds the model's max_position_embeddings ",
                                                   c.max_position_embeddings));
  }
  if (!request.params.stop_strings.empty() && !options_.detokenize) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": stop strings need a tokenizer, and the engine has none"));
  }
  for (const auto& g : groups_) {
    if (g->request.id == request.id) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": id already in flight"));
    }
  }
  return absl::OkStatus();
}

absl::Status LlmEngine::Submit(GenerationRequest request) {
  RETURN_IF_ERROR(CheckRequest(request));
  const int64_t len = static_cast<int64_t>(request.prompt.size());
  auto group = std::make_unique<Group>();
  group->request = std::move(request);
  group->remaining = group->request.n;
  auto add = [&](int64_t index) {
    auto s = std::make_unique<Sequence>();
    s->group = group.get();
    s->index = index;
    s->tokens = group->request.prompt;
    s->prompt_len = len;
    if (index >= 0) {
      s->rng = SampleRng(group->request.params.seed, index);
      s->out.index = index;
    }
    waiting_.push_back(s.get());
    group->seqs.push_back(std::move(s));
  };
  if (options_.prefix_sharing && group->request.n > 1) {
    add(-1);
  } else {
    for (int64_t i = 0; i < group->request.n; ++i) add(i);
  }
  groups_.push_back(std::move(group));
  return absl::OkStatus();
}

bool LlmEngine::HasUnfinished() const { return !groups_.empty(); }

std::vector<FinishedGroup> LlmEngine::TakeFinished() {
  std::vector<FinishedGroup> out;
  out.swap(finished_);
  return out;
}

void LlmEngine::RequestWeightUpdate(std::function<absl::Status(models::Transformer&)> apply,
                                    int64_t version) {
  pending_update_ = std::make_unique<PendingUpdate>();
  pending_update_->apply = std::move(apply);
  pending_update_->version = version;
}

absl::Status LlmEngine::MaybeApplyWeightUpdate() {
  if (!pending_update_) return absl::OkStatus();
  if (options_.weight_update == "drain") {
    for (const auto& g : groups_) {
      if (g->started) return absl::OkStatus();  // in flight on the old weights: let it finish
    }
  } else {
    // recompute: every in-flight sequence drops its KV and recomputes it.
    while (!running_.empty()) Preempt(running_.back());
  }
  const std::unique_ptr<PendingUpdate> update = std::move(pending_update_);
  absl::Status applied;
  {
    torch::NoGradGuard no_grad;
    applied = update->apply(model_);
  }
  if (!applied.ok()) {
    torn_ = absl::StrCat("a failed update to version ", update->version, " left the weights torn");
    return applied;
  }
  torn_.clear();
  version_ = update->version;
  // The graphs read the parameters by address: the loaders copy into them, and should one
  // replace them instead, the graphs are dropped and captured again.
  if (graphs_) graphs_->ParametersMoved(model_->parameters());
  return absl::OkStatus();
}

void LlmEngine::Preempt(Sequence* seq) {
  auto it = std::find(running_.begin(), running_.end(), seq);
  RF_CHECK(it != running_.end());
  running_.erase(it);
  blocks_.Release(seq->table);
  seq->computed = 0;
  seq->skip_from = INT64_MAX, seq->skip = 0;  // recomputed alone: no shared prompt
  waiting_.push_front(seq);
  ++stats_.preemptions;
}

bool LlmEngine::Schedule(std::vector<Sequence*>& batch, std::vector<int64_t>& chunk) {
  int64_t budget = options_.max_tokens_per_step;
  // Running sequences first, oldest first; the newest are preempted when
  // blocks run out (their work is recomputed later).
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* s = running_[i];
    const int64_t len = static_cast<int64_t>(s->tokens.size());
    const int64_t want = std::min(len - s->computed, budget);
    bool fits = true;
    while (!blocks_.Reserve(s->table, s->Slots(s->computed), s->Slots(s->computed + want),
                            pending_copies_)) {
      Sequence* victim = running_.back();
      Preempt(victim);
      if (victim == s) {
        fits = false;
        break;
      }
    }
    if (!fits) break;  // s was the newest: nothing after it runs this step
    batch.push_back(s);
    chunk.push_back(want);
    budget -= want;
    ++i;
  }
  // Then waiting sequences, first come first served, while blocks stay above
  // a small watermark (so admitting prefills does not starve running decodes).
  const int64_t watermark = std::max<int64_t>(1, blocks_.num_blocks() / 100);
  while (budget > 0 && !waiting_.empty()) {
    Sequence* s = waiting_.front();
    if (pending_update_ && options_.weight_update == "drain" && !s->group->started) break;
    const int64_t joining = s->index < 0 ? s->group->request.n : 1;
    if (!running_.empty() && static_cast<int64_t>(running_.size()) + joining > options_.max_batch) {
      break;
    }
    const int64_t len = static_cast<int64_t>(s->tokens.size());
    const int64_t want = std::min(len - s->computed, budget);
    const int64_t need =
        blocks_.BlocksNeeded(s->table, s->Slots(s->computed), s->Slots(s->computed + want));
    if (!running_.empty() && blocks_.num_free() - need < watermark) break;
    if (!blocks_.Reserve(s->table, s->Slots(s->computed), s->Slots(s->computed + want),
                         pending_copies_)) {
      break;
    }
    waiting_.pop_front();
    running_.push_back(s);
    s->group->started = true;
    batch.push_back(s);
    chunk.push_back(want);
    budget -= want;
  }
  stats_.peak_blocks = std::max(stats_.peak_blocks, blocks_.num_used());
  stats_.max_running = std::max(stats_.max_running, static_cast<int64_t>(running_.size()));
  return !batch.empty();
}

absl::Status LlmEngine::Step() {
  if (absl::Status s = MaybeApplyWeightUpdate(); !s.ok()) return s;
  if (!torn_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("engine: ", torn_, "; it serves nothing until a whole version loads"));
  }
  std::vector<Sequence*> batch;
  std::vector<int64_t> chunk;
  if (!Schedule(batch, chunk)) {
    if (!waiting_.empty()) {
      return absl::InternalError("engine: waiting sequences but nothing could be scheduled");
    }
    return absl::OkStatus();
  }
  ++stats_.steps;
  return RunModel(batch, chunk);
}

absl::Status LlmEngine::RunToCompletion() {
  while (HasUnfinished()) {
    if (absl::Status s = Step(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

void LlmEngine::ApplyBlockCopies() {
  const auto& c = model_->config();
  // Copy-on-write: move shared partial blocks' KV before anything writes.
  const int64_t block_elems = options_.block_size * c.num_key_value_heads * c.head_dim;
  for (const BlockCopy& copy : pending_copies_) {
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
    stats_.prompt_kv_slots += copy.num_tokens;
    ++stats_.cow_copies;
  }
  pending_copies_.clear();
}

// What one step feeds the model, and who draws from which of its logits rows.
struct LlmEngine::StepInputs {
  PagedBatch pb;
  std::vector<int64_t> tokens, positions;
  // Hidden rows whose logits the step computes, and per drawing sequence its logits row. The
  // kernel path gives every drawer a row of its own (a fork repeats its prompt's hidden row),
  // since the sampler kernel draws row i for drawer i; the own path computes each row once.
  std::vector<int64_t> logit_rows;
  std::vector<Sequence*> drawers;
  std::vector<int64_t> drawer_row;
};

LlmEngine::StepInputs LlmEngine::BuildStep(const std::vector<Sequence*>& batch,
                                           const std::vector<int64_t>& chunk) {
  StepInputs in;
  PagedBatch& pb = in.pb;
  pb.block_size = options_.block_size;
  pb.table_start.push_back(0);
  for (size_t i = 0; i < batch.size(); ++i) {
    Sequence* s = batch[i];
    for (int64_t p = s->computed; p < s->computed + chunk[i]; ++p) {
      in.tokens.push_back(s->tokens[p]);
      in.positions.push_back(p);
      pb.row_seq.push_back(static_cast<int32_t>(i));
      pb.row_context.push_back(static_cast<int32_t>(p + 1));
      const int64_t u = s->SlotIndex(p);
      pb.row_slot.push_back(static_cast<int64_t>(s->table[u / options_.block_size]) *
                                options_.block_size +
                            u % options_.block_size);
      if (p < s->prompt_len) ++stats_.prompt_kv_slots;
    }
    if (chunk[i] > 1 || s->computed < s->prompt_len) stats_.prefill_tokens += chunk[i];
    pb.tables.insert(pb.tables.end(), s->table.begin(), s->table.end());
    pb.table_start.push_back(static_cast<int32_t>(pb.tables.size()));
    pb.seq_skip_from.push_back(s->skip_from);
    pb.seq_skip.push_back(s->skip);
    s->computed += chunk[i];
    if (s->computed < static_cast<int64_t>(s->tokens.size())) continue;  // prefill goes on
    const int64_t hidden_row = static_cast<int64_t>(in.tokens.size()) - 1;
    // The block tables above are copied already: forking now changes nothing this step reads.
    const std::vector<Sequence*> drawers = s->index < 0 ? Fork(s) : std::vector<Sequence*>{s};
    if (!use_kernels_) in.logit_rows.push_back(hidden_row);
    for (Sequence* d : drawers) {
      if (use_kernels_) in.logit_rows.push_back(hidden_row);
      in.drawers.push_back(d);
      in.drawer_row.push_back(static_cast<int64_t>(in.logit_rows.size()) - 1);
    }
  }
  return in;
}

absl::Status LlmEngine::RunModel(const std::vector<Sequence*>& batch,
                                 const std::vector<int64_t>& chunk) {
  ApplyBlockCopies();
  const StepInputs in = BuildStep(batch, chunk);
  std::vector<SampledToken> draws;
  RETURN_IF_ERROR(CallCatching(
      [&]() -> absl::Status {
        draws = Forward(in);
        return absl::OkStatus();
      },
      "engine: model forward failed: "));
  for (size_t i = 0; i < in.drawers.size(); ++i) Append(in.drawers[i], draws[i]);
  Retire();
  return absl::OkStatus();
}

std::vector<SampledToken> LlmEngine::Forward(const StepInputs& in) {
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

std::vector<SampledToken> LlmEngine::KernelForward(const StepInputs& in) {
  const int64_t rows = static_cast<int64_t>(in.tokens.size());
  const HostSampling sampling = SamplingOf(in, model_->config().vocab_size);
  // A decode step: every row draws once, from its own logits row (no fork shares one).
  bool decode = static_cast<int64_t>(in.logit_rows.size()) == rows;
  for (int64_t i = 0; decode && i < rows; ++i) decode = in.logit_rows[i] == i;
  if (decode && graphs_ && graphs_->Serves(in.pb, rows)) {
    absl::StatusOr<std::vector<SampledToken>> out =
        graphs_->Run(in.tokens, in.positions, in.pb, sampling);
    if (!out.ok()) throw std::runtime_error(Msg(out.status()));
    ++stats_.graph_steps;
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

kernel_ops::SampledRows LlmEngine::KernelStep(const DeviceStep& in) {
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

HostSampling LlmEngine::SamplingOf(const StepInputs& in, int64_t vocab) const {
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

std::vector<SampledToken> LlmEngine::OwnDraws(const torch::Tensor& logits, const StepInputs& in) {
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

void LlmEngine::Append(Sequence* s, const SampledToken& draw) {
  s->tokens.push_back(draw.token);
  s->out.tokens.push_back(draw.token);
  s->out.logprobs.push_back(draw.logprob);
  s->out.versions.push_back(version_);
  ++stats_.generated_tokens;
  StopsAt(s);
}

void LlmEngine::Retire() {
  // Keeps admission order for the rest.
  std::vector<Sequence*> keep;
  for (Sequence* s : running_) {
    if (!s->finished) {
      keep.push_back(s);
      continue;
    }
    blocks_.Release(s->table);
    Group* g = s->group;
    if (s->index < 0) continue;
    g->done.push_back(std::move(s->out));
    if (--g->remaining > 0) continue;
    FinishedGroup f;
    f.request_id = g->request.id;
    f.prompt = g->request.prompt;
    f.samples = std::move(g->done);
    std::sort(f.samples.begin(), f.samples.end(),
              [](const GeneratedSample& a, const GeneratedSample& b) { return a.index < b.index; });
    finished_.push_back(std::move(f));
    auto it =
        std::find_if(groups_.begin(), groups_.end(), [&](const auto& p) { return p.get() == g; });
    groups_.erase(it);  // frees g and its sequences, s included
  }
  running_ = std::move(keep);
}

std::vector<LlmEngine::Sequence*> LlmEngine::Fork(Sequence* leader) {
  Group* g = leader->group;
  std::vector<Sequence*> forks;
  for (int64_t i = 0; i < g->request.n; ++i) {
    auto s = std::make_unique<Sequence>();
    s->group = g;
    s->index = i;
    s->tokens = leader->tokens;
    s->prompt_len = leader->prompt_len;
    s->computed = leader->computed;
    s->table = blocks_.Fork(leader->table);
    if (g->request.n > 1) {
      s->skip_from = s->prompt_len;
      s->skip = (options_.block_size - s->prompt_len % options_.block_size) % options_.block_size;
    }
    s->rng = SampleRng(g->request.params.seed, i);
    s->out.index = i;
    forks.push_back(s.get());
    g->seqs.push_back(std::move(s));
  }
  // The leader's place in the batch goes to its samples; its references go.
  auto it = std::find(running_.begin(), running_.end(), leader);
  RF_CHECK(it != running_.end());
  it = running_.erase(it);
  running_.insert(it, forks.begin(), forks.end());
  blocks_.Release(leader->table);
  return forks;
}

bool LlmEngine::StopsAt(Sequence* s) const {
  const SamplingParams& p = s->group->request.params;
  const int32_t last = s->out.tokens.back();
  if (std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), last) != p.stop_token_ids.end()) {
    s->out.finish_reason = "stop";
  } else if (!p.stop_strings.empty()) {
    const std::string text = options_.detokenize(s->out.tokens);
    for (const std::string& stop : p.stop_strings) {
      if (!stop.empty() && text.find(stop) != std::string::npos) {
        s->out.finish_reason = "stop";
        break;
      }
    }
  }
  if (s->out.finish_reason.empty() && static_cast<int64_t>(s->out.tokens.size()) >= p.max_tokens) {
    s->out.finish_reason = "length";
  }
  s->finished = !s->out.finish_reason.empty();
  return s->finished;
}

}  // namespace rlforge
