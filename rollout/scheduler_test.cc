// The scheduler alone, with no model: a fake draw stands in for the model runner, so admission,
// continuous batching, block accounting, preemption, prefix sharing and finishing are tested
// step by step on exact values.
#include "rollout/scheduler.h"

#include <gtest/gtest.h>

#include <map>

namespace rlforge {
namespace {

// The model runner's stand-in: a drawer's token depends only on its own tokens so far, so a
// sequence recomputed after preemption draws what it would have drawn anyway.
std::vector<SampledToken> FakeDraws(const ScheduledStep& step) {
  std::vector<SampledToken> draws;
  for (const Sequence* s : step.drawers) {
    draws.push_back({static_cast<int32_t>(10 + s->tokens.size() % 7), -0.5f});
  }
  return draws;
}

// What FakeDraws gives a prompt of `prompt_len` tokens, for `count` tokens.
std::vector<int32_t> FakeTokens(int64_t prompt_len, int64_t count) {
  std::vector<int32_t> tokens;
  for (int64_t i = 0; i < count; ++i) tokens.push_back(10 + (prompt_len + i) % 7);
  return tokens;
}

GenerationRequest Request(uint64_t id, int64_t prompt_len, int64_t max_tokens, int64_t n = 1) {
  GenerationRequest r;
  r.id = id;
  for (int64_t i = 0; i < prompt_len; ++i) r.prompt.push_back(static_cast<int32_t>(i + 1));
  r.n = n;
  r.params.max_tokens = max_tokens;
  return r;
}

SchedulerSettings Settings(int64_t num_blocks, int64_t tokens_per_step) {
  SchedulerSettings s;
  s.block_size = 4;
  s.num_blocks = num_blocks;
  s.max_batch = 8;
  s.max_tokens_per_step = tokens_per_step;
  s.prefix_sharing = false;
  return s;
}

std::vector<uint64_t> Ids(const ScheduledStep& step) {
  std::vector<uint64_t> ids;
  for (const Sequence* s : step.seqs) ids.push_back(s->group->request.id);
  return ids;
}

// Schedules, draws and post-processes one step; the step as scheduled.
struct StepView {
  std::vector<uint64_t> ids;
  std::vector<int64_t> start, chunk;
  size_t drawers = 0;
};
StepView RunStep(Scheduler& s, bool admit_new = true) {
  const ScheduledStep step = s.Schedule(admit_new);
  StepView v{Ids(step), step.start, step.chunk, step.drawers.size()};
  if (!step.empty()) s.PostProcess(step, FakeDraws(step), /*version=*/3);
  return v;
}

// Steps until nothing is left; every group handed over, each once.
std::map<uint64_t, FinishedGroup> RunToEnd(Scheduler& s) {
  std::map<uint64_t, FinishedGroup> done;
  for (int steps = 0;; ++steps) {
    for (FinishedGroup& g : s.TakeFinished()) {
      EXPECT_TRUE(done.emplace(g.request_id, std::move(g)).second) << "finished twice";
    }
    if (!s.HasUnfinished() || steps == 1000) break;
    if (RunStep(s).ids.empty()) {
      ADD_FAILURE() << "a step scheduled nothing with work left";
      break;
    }
  }
  EXPECT_FALSE(s.HasUnfinished());
  return done;
}

TEST(Scheduler, AdmitsFirstComeFirstServedWithinTheTokenBudget) {
  Scheduler s(Settings(64, 10));
  ASSERT_TRUE(s.Add(Request(1, 4, 3)).ok());
  ASSERT_TRUE(s.Add(Request(2, 4, 3)).ok());
  ASSERT_TRUE(s.Add(Request(3, 4, 3)).ok());
  // 10 tokens: two whole prompts, then a chunk of the third (a chunk draws nothing).
  StepView first = RunStep(s);
  EXPECT_EQ(first.ids, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(first.start, (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(first.chunk, (std::vector<int64_t>{4, 4, 2}));
  EXPECT_EQ(first.drawers, 2u);
  // Running sequences first, oldest first: two decodes, then the rest of the third prompt.
  StepView second = RunStep(s);
  EXPECT_EQ(second.ids, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(second.start, (std::vector<int64_t>{4, 4, 2}));
  EXPECT_EQ(second.chunk, (std::vector<int64_t>{1, 1, 2}));
  EXPECT_EQ(second.drawers, 3u);
  EXPECT_EQ(s.stats().prefill_tokens, 12);
  EXPECT_EQ(s.stats().generated_tokens, 5);
}

TEST(Scheduler, WaitsForStartedGroupsWhenNewOnesMayNotBeAdmitted) {
  Scheduler s(Settings(64, 64));
  ASSERT_TRUE(s.Add(Request(1, 4, 3)).ok());
  EXPECT_TRUE(RunStep(s, /*admit_new=*/false).ids.empty());
  EXPECT_FALSE(s.AnyStarted());
  ASSERT_TRUE(s.Add(Request(2, 4, 3)).ok());
  EXPECT_EQ(RunStep(s).ids, (std::vector<uint64_t>{1, 2}));
  ASSERT_TRUE(s.Add(Request(3, 4, 3)).ok());
  EXPECT_EQ(RunStep(s, /*admit_new=*/false).ids, (std::vector<uint64_t>{1, 2}));
  EXPECT_TRUE(s.AnyStarted());
}

TEST(Scheduler, PreemptsTheNewestWhenBlocksRunOutAndRecomputesItExactly) {
  // 4 blocks of 4 slots: two sequences of 4 + 8 tokens need 6 blocks between them.
  Scheduler s(Settings(4, 64));
  ASSERT_TRUE(s.Add(Request(1, 4, 8)).ok());
  ASSERT_TRUE(s.Add(Request(2, 4, 8)).ok());
  int64_t steps_before = 0;
  while (s.stats().preemptions == 0) {
    ASSERT_LT(++steps_before, 20) << "the pool was meant to run out";
    const ScheduledStep step = s.Schedule(true);
    if (s.stats().preemptions > 0) {
      // The older sequence goes on; the newer gave its blocks back and waits at the front.
      EXPECT_EQ(Ids(step), (std::vector<uint64_t>{1}));
      EXPECT_EQ(s.num_running(), 1);
      EXPECT_EQ(s.blocks().num_used(), 3);
    }
    s.PostProcess(step, FakeDraws(step), 3);
  }
  std::map<uint64_t, FinishedGroup> done = RunToEnd(s);
  ASSERT_EQ(done.size(), 2u);
  for (uint64_t id : {1, 2}) {
    ASSERT_EQ(done[id].samples.size(), 1u);
    EXPECT_EQ(done[id].samples[0].tokens, FakeTokens(4, 8)) << "request " << id;
    EXPECT_EQ(done[id].samples[0].finish_reason, "length");
  }
  // The recompute fed the preempted sequence's prompt and generated tokens again.
  EXPECT_GT(s.stats().prefill_tokens, 8);
  EXPECT_EQ(s.blocks().num_used(), 0);
}

TEST(Scheduler, FinishesOnStopTokenOrLengthAndHandsOverWholeGroupsInIndexOrder) {
  Scheduler s(Settings(64, 64));
  GenerationRequest stops = Request(1, 4, 10, /*n=*/3);
  stops.params.stop_token_ids = {FakeTokens(4, 2)[1]};  // the second token drawn
  ASSERT_TRUE(s.Add(stops).ok());
  ASSERT_TRUE(s.Add(Request(2, 5, 3)).ok());
  std::map<uint64_t, FinishedGroup> done = RunToEnd(s);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[1].prompt, stops.prompt);
  ASSERT_EQ(done[1].samples.size(), 3u);
  for (int64_t i = 0; i < 3; ++i) {
    const GeneratedSample& g = done[1].samples[i];
    EXPECT_EQ(g.index, i);
    EXPECT_EQ(g.tokens, FakeTokens(4, 2));
    EXPECT_EQ(g.logprobs, (std::vector<float>{-0.5f, -0.5f}));
    EXPECT_EQ(g.versions, (std::vector<int64_t>{3, 3}));
    EXPECT_EQ(g.finish_reason, "stop");
  }
  ASSERT_EQ(done[2].samples.size(), 1u);
  EXPECT_EQ(done[2].samples[0].tokens, FakeTokens(5, 3));
  EXPECT_EQ(done[2].samples[0].finish_reason, "length");
  EXPECT_EQ(s.blocks().num_used(), 0);
  EXPECT_EQ(s.num_running(), 0);
}

TEST(Scheduler, SharedPromptIsPrefilledOnceAndForksIntoTheSamples) {
  SchedulerSettings settings = Settings(64, 64);
  settings.prefix_sharing = true;
  Scheduler s(settings);
  ASSERT_TRUE(s.Add(Request(1, 6, 2, /*n=*/3)).ok());
  const ScheduledStep step = s.Schedule(true);
  // One leader computes the prompt; its three samples each draw from its last row.
  ASSERT_EQ(step.seqs.size(), 1u);
  EXPECT_EQ(step.seqs[0]->index, -1);
  EXPECT_EQ(step.chunk, (std::vector<int64_t>{6}));
  ASSERT_EQ(step.drawers.size(), 3u);
  EXPECT_EQ(step.drawer_entry, (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(step.seqs[0]->table.size(), 2u) << "the leader's table stays for the step";
  EXPECT_EQ(s.blocks().num_used(), 2) << "the prompt's blocks are held once, by the samples";
  s.PostProcess(step, FakeDraws(step), 3);
  EXPECT_EQ(s.num_running(), 3);
  // Each sample writes from the next block boundary on: one new block each, nothing copied.
  const ScheduledStep next = s.Schedule(true);
  EXPECT_EQ(next.chunk, (std::vector<int64_t>{1, 1, 1}));
  EXPECT_TRUE(next.copies.empty());
  EXPECT_EQ(s.blocks().num_used(), 5);
  s.PostProcess(next, FakeDraws(next), 3);
  std::map<uint64_t, FinishedGroup> done = RunToEnd(s);
  ASSERT_EQ(done[1].samples.size(), 3u);
  for (const GeneratedSample& g : done[1].samples) EXPECT_EQ(g.tokens, FakeTokens(6, 2));
  EXPECT_EQ(s.stats().prompt_kv_slots, 6);
  EXPECT_EQ(s.blocks().num_used(), 0);
}

TEST(Scheduler, PreemptAllSendsEveryRunningSequenceBackToRecompute) {
  Scheduler s(Settings(64, 64));
  ASSERT_TRUE(s.Add(Request(1, 4, 5)).ok());
  ASSERT_TRUE(s.Add(Request(2, 4, 5)).ok());
  RunStep(s);
  s.PreemptAll();
  EXPECT_EQ(s.num_running(), 0);
  EXPECT_EQ(s.blocks().num_used(), 0);
  EXPECT_EQ(s.stats().preemptions, 2);
  // Admission order is kept: both recompute their 5 tokens, the older first.
  StepView again = RunStep(s);
  EXPECT_EQ(again.ids, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(again.chunk, (std::vector<int64_t>{5, 5}));
}

TEST(Scheduler, AddRejectsBadRequestsByNameAndKeepsNothing) {
  SchedulerSettings settings = Settings(4, 64);
  settings.max_positions = 12;
  Scheduler s(settings);
  auto message = [&](const GenerationRequest& r) { return std::string(s.Add(r).message()); };
  EXPECT_EQ(message(Request(7, 0, 2)), "generation request 7: empty prompt");
  EXPECT_EQ(message(Request(7, 2, 2, /*n=*/9)),
            "generation request 7: n = 9 must be in [1, engine.max_batch = 8]");
  EXPECT_EQ(message(Request(7, 2, 0)), "generation request 7: max_tokens must be positive");
  EXPECT_EQ(message(Request(7, 4, 13)),
            "generation request 7: prompt (4) + max_tokens (13) needs 5 KV blocks; the pool has 4");
  EXPECT_EQ(message(Request(7, 4, 9)),
            "generation request 7: prompt + max_tokens = 13 exceeds the model's "
            "max_position_embeddings 12");
  GenerationRequest stop = Request(7, 2, 2);
  stop.params.stop_strings = {"x"};
  EXPECT_EQ(message(stop),
            "generation request 7: stop strings need a tokenizer, and the engine "
            "has none");
  EXPECT_FALSE(s.HasUnfinished());
  ASSERT_TRUE(s.Add(Request(7, 2, 2)).ok());
  EXPECT_EQ(message(Request(7, 2, 2)), "generation request 7: id already in flight");
}

}  // namespace
}  // namespace rlforge
