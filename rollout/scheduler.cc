#include "rollout/scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/status.h"

namespace rlforge {

Scheduler::Scheduler(const SchedulerSettings& settings)
    : options_(settings), blocks_(settings.num_blocks, settings.block_size) {}

Scheduler::~Scheduler() = default;

absl::Status Scheduler::CheckRequest(const GenerationRequest& request) const {
  const int64_t len = static_cast<int64_t>(request.prompt.size());
  const std::string where = absl::StrCat("generation request ", request.id);
  if (len == 0) return absl::InvalidArgumentError(absl::StrCat(where, ": empty prompt"));
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
  if (total > options_.max_positions) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": prompt + max_tokens = ", total,
                                                   " exceeds the model's max_position_embeddings ",
                                                   options_.max_positions));
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

absl::Status Scheduler::Add(GenerationRequest request) {
  RETURN_IF_ERROR(CheckRequest(request));
  const int64_t len = static_cast<int64_t>(request.prompt.size());
  auto group = std::make_unique<SequenceGroup>();
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

std::vector<FinishedGroup> Scheduler::TakeFinished() {
  std::vector<FinishedGroup> out;
  out.swap(finished_);
  return out;
}

bool Scheduler::AnyStarted() const {
  return std::any_of(groups_.begin(), groups_.end(), [](const auto& g) { return g->started; });
}

void Scheduler::PreemptAll() {
  while (!running_.empty()) Preempt(running_.back());
}

void Scheduler::Preempt(Sequence* seq) {
  auto it = std::find(running_.begin(), running_.end(), seq);
  RF_CHECK(it != running_.end());
  running_.erase(it);
  blocks_.Release(seq->table);
  seq->computed = 0;
  seq->skip_from = INT64_MAX, seq->skip = 0;  // recomputed alone: no shared prompt
  waiting_.push_front(seq);
  ++stats_.preemptions;
}

ScheduledStep Scheduler::Schedule(bool admit_new) {
  ScheduledStep step;
  int64_t budget = options_.max_tokens_per_step;
  ScheduleRunning(step, budget);
  AdmitWaiting(step, budget, admit_new);
  stats_.peak_blocks = std::max(stats_.peak_blocks, blocks_.num_used());
  stats_.max_running = std::max(stats_.max_running, static_cast<int64_t>(running_.size()));
  if (step.empty()) return step;
  ++stats_.steps;
  for (const BlockCopy& copy : step.copies) {
    stats_.prompt_kv_slots += copy.num_tokens;
    ++stats_.cow_copies;
  }
  // Who draws: sequences whose chunk reaches their last token. The tables were read into the
  // step already, so a leader forking now changes nothing the step computes.
  for (size_t i = 0; i < step.seqs.size(); ++i) {
    Sequence* s = step.seqs[i];
    if (s->computed < static_cast<int64_t>(s->tokens.size())) continue;  // prefill goes on
    std::vector<Sequence*> drawers{s};
    if (s->index < 0) drawers = Fork(s);
    for (Sequence* d : drawers) {
      step.drawers.push_back(d);
      step.drawer_entry.push_back(static_cast<int64_t>(i));
    }
  }
  return step;
}

void Scheduler::ScheduleRunning(ScheduledStep& step, int64_t& budget) {
  // Oldest first; the newest are preempted when blocks run out (their work is recomputed later).
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* s = running_[i];
    const int64_t len = static_cast<int64_t>(s->tokens.size());
    const int64_t want = std::min(len - s->computed, budget);
    bool fits = true;
    while (!blocks_.Reserve(s->table, s->Slots(s->computed), s->Slots(s->computed + want),
                            step.copies)) {
      Sequence* victim = running_.back();
      Preempt(victim);
      if (victim == s) {
        fits = false;
        break;
      }
    }
    if (!fits) break;  // s was the newest: nothing after it runs this step
    AddToStep(step, s, want);
    budget -= want;
    ++i;
  }
}

void Scheduler::AdmitWaiting(ScheduledStep& step, int64_t& budget, bool admit_new) {
  // First come first served, while blocks stay above a small watermark (so admitting prefills
  // does not starve running decodes).
  const int64_t watermark = std::max<int64_t>(1, blocks_.num_blocks() / 100);
  while (budget > 0 && !waiting_.empty()) {
    Sequence* s = waiting_.front();
    if (!admit_new && !s->group->started) break;
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
                         step.copies)) {
      break;
    }
    waiting_.pop_front();
    running_.push_back(s);
    s->group->started = true;
    AddToStep(step, s, want);
    budget -= want;
  }
}

void Scheduler::AddToStep(ScheduledStep& step, Sequence* s, int64_t want) {
  step.seqs.push_back(s);
  step.start.push_back(s->computed);
  step.chunk.push_back(want);
  stats_.prompt_kv_slots += std::max<int64_t>(
      0, std::min(s->computed + want, s->prompt_len) - std::min(s->computed, s->prompt_len));
  if (want > 1 || s->computed < s->prompt_len) stats_.prefill_tokens += want;
  s->computed += want;
}

std::vector<Sequence*> Scheduler::Fork(Sequence* leader) {
  SequenceGroup* g = leader->group;
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
  // The leader's place in the batch goes to its samples, and its references go: the samples
  // hold every block, so none is freed, and the leader's table still says where this step
  // writes its KV.
  auto it = std::find(running_.begin(), running_.end(), leader);
  RF_CHECK(it != running_.end());
  it = running_.erase(it);
  running_.insert(it, forks.begin(), forks.end());
  std::vector<int32_t> references = leader->table;
  blocks_.Release(references);
  return forks;
}

void Scheduler::PostProcess(const ScheduledStep& step, const std::vector<SampledToken>& draws,
                            int64_t version) {
  RF_CHECK(draws.size() == step.drawers.size());
  for (size_t i = 0; i < step.drawers.size(); ++i) Append(step.drawers[i], draws[i], version);
  Retire();
}

void Scheduler::Append(Sequence* s, const SampledToken& draw, int64_t version) {
  s->tokens.push_back(draw.token);
  s->out.tokens.push_back(draw.token);
  s->out.logprobs.push_back(draw.logprob);
  s->out.versions.push_back(version);
  ++stats_.generated_tokens;
  StopsAt(s);
}

bool Scheduler::StopsAt(Sequence* s) const {
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

void Scheduler::Retire() {
  // Keeps admission order for the rest.
  std::vector<Sequence*> keep;
  for (Sequence* s : running_) {
    if (!s->finished) {
      keep.push_back(s);
      continue;
    }
    blocks_.Release(s->table);
    SequenceGroup* g = s->group;
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

}  // namespace rlforge
