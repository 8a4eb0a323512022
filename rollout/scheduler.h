// Scheduler: which sequences the LLM engine's next step computes, and what becomes of them.
//
// requests -> waiting -> admitted (KV blocks reserved) -> running -> drawn tokens appended ->
// finished groups
//
// It holds the requests in flight and the paged KV cache's block accounting (BlockManager),
// never a tensor: the model runner (rollout/model_runner.h) computes what Schedule() picked,
// and PostProcess() takes back the tokens it drew. Each step serves running sequences first,
// oldest first, then admits waiting ones first come first served while blocks stay above a
// small watermark. When blocks run out, the most recently admitted sequence is preempted: its
// blocks are freed and it is recomputed later from its tokens, so no request is ever lost.
// With prefix sharing a group's prompt is prefilled once by a leader; when its prefill ends
// the leader forks into the n samples, which share its KV blocks (its last partial block too:
// each sample writes its own tokens from the next block boundary on).
//
// Not thread-safe: the engine's step thread owns it.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "rollout/block_manager.h"
#include "rollout/generation.h"
#include "rollout/sampler.h"
#include "rollout/sequence.h"

namespace rlforge {

struct SchedulerSettings {
  int64_t block_size = 16;
  int64_t num_blocks = 1024;
  int64_t max_batch = 256;             // running sequences at most
  int64_t max_tokens_per_step = 2048;  // tokens computed per step (prefill chunks + decodes)
  int64_t max_positions = 1 << 30;     // a sequence's length at most (the model's)
  bool prefix_sharing = true;
  // Turns generated token ids into text for stop strings; empty: stop strings unsupported.
  std::function<std::string(const std::vector<int32_t>&)> detokenize;
};

struct SchedulerStats {
  int64_t steps = 0;
  int64_t generated_tokens = 0;
  int64_t prefill_tokens = 0;  // tokens fed as prefill, recompute included
  int64_t preemptions = 0;
  int64_t peak_blocks = 0;
  int64_t prompt_kv_slots = 0;  // KV slots ever written with prompt tokens (copies included)
  int64_t cow_copies = 0;
  int64_t max_running = 0;
};

// One step's work. Sequence i computes the KV of positions [start[i], start[i] + chunk[i]).
// A drawer draws one token from the last row of its batch entry: a sequence whose chunk
// reaches its last token, or, for a leader of a shared prompt, each of the samples it forked
// into (the leader keeps its table for this step; its samples hold the blocks).
struct ScheduledStep {
  std::vector<Sequence*> seqs;
  std::vector<int64_t> start, chunk;
  std::vector<BlockCopy> copies;  // copy-on-write moves, to apply before the step writes KV
  std::vector<Sequence*> drawers;
  std::vector<int64_t> drawer_entry;  // index into seqs

  bool empty() const { return seqs.empty(); }
};

class Scheduler {
 public:
  explicit Scheduler(const SchedulerSettings& settings);
  ~Scheduler();

  // Queues a request. Errors (and changes nothing) when the prompt is empty, n or max_tokens is
  // out of range, the request cannot fit the pool alone or the positions, it has stop strings
  // and no detokenizer, or its id is in flight.
  absl::Status Add(GenerationRequest request);

  // The next step's batch (empty: nothing could run). With `admit_new` false, groups that have
  // not started stay waiting (a weight update drains the started ones first).
  ScheduledStep Schedule(bool admit_new);
  // Appends each drawer's token (drawn under policy `version`), then frees finished sequences
  // and hands over groups whose samples have all finished.
  void PostProcess(const ScheduledStep& step, const std::vector<SampledToken>& draws,
                   int64_t version);

  // Every running sequence back to waiting, to recompute its KV (new weights).
  void PreemptAll();
  // Whether a group in flight holds KV computed by the current weights.
  bool AnyStarted() const;

  // Groups whose n samples have all finished since the last call.
  std::vector<FinishedGroup> TakeFinished();
  bool HasUnfinished() const { return !groups_.empty(); }
  bool HasWaiting() const { return !waiting_.empty(); }
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  const BlockManager& blocks() const { return blocks_; }
  const SchedulerStats& stats() const { return stats_; }

 private:
  absl::Status CheckRequest(const GenerationRequest& request) const;
  // Running sequences into the step, preempting the newest when blocks run out.
  void ScheduleRunning(ScheduledStep& step, int64_t& budget);
  // Waiting sequences into the step while blocks stay above the watermark.
  void AdmitWaiting(ScheduledStep& step, int64_t& budget, bool admit_new);
  void AddToStep(ScheduledStep& step, Sequence* s, int64_t want);
  // The samples that continue the leader; they take its place in the running batch.
  std::vector<Sequence*> Fork(Sequence* leader);
  void Preempt(Sequence* seq);
  // A drawn token onto its sequence (tokens, logprob, version, stop check).
  void Append(Sequence* seq, const SampledToken& draw, int64_t version);
  bool StopsAt(Sequence* seq) const;
  // Frees finished sequences and hands over groups whose samples have all finished.
  void Retire();

  SchedulerSettings options_;
  BlockManager blocks_;
  std::vector<std::unique_ptr<SequenceGroup>> groups_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;  // admission order
  std::vector<FinishedGroup> finished_;
  SchedulerStats stats_;
};

}  // namespace rlforge
