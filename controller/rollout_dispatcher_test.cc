// RolloutDispatcher driven directly, against scripted fakes (FakeActors, FakeLmRollout): the
// batches it deals come back whole, in example order, routed by request id, in both modes; a
// lost engine's groups are dealt again with the same ids; the checkpoint record lists the
// batches in flight. No process, socket or sleep.
#include "controller/rollout_dispatcher.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "controller/fake_actors.h"
#include "controller/fake_lm_actors.h"

namespace rlforge::testing {
namespace {

using Task = proto::WorkRequest::TaskCase;

class RolloutDispatcherTest : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override {
    root_ = FreshTestDir();
    WriteTokenizerCheckpoint(root_ + "/model");
    config_ = TestConfig(absl::StrCat(
        "job: {algorithm: grpo, seed: 1, iterations: 2}\nmodel: {path: ", root_, "/model}\n",
        "data: {source: arithmetic, min_digits: 1, max_digits: 1, ops: ['+']}\n",
        "controller: {request_timeout_s: 30}\nrollout: {workers: 2, max_staleness: ", GetParam(),
        "}\ngrpo: {prompts_per_iteration: 4, group_size: 2, max_new_tokens: 6}\n"));
    auto tok = models::LoadTokenizer(root_ + "/model");
    ASSERT_TRUE(tok.ok()) << tok.status();
    tok_ = std::move(*tok);
    actors_ = std::make_unique<FakeActors>(config_);
    actors_->AddRoles(LmRoles(config_));
    rollout_ = std::make_unique<FakeLmRollout>(
        *tok_, tmpl_, [](const std::string& prompt, const proto::LmGenerate&, int64_t j) {
          return j == 0 ? PlainAnswer(prompt) : "x";  // sample 0 right, sample 1 wrong
        });
    actors_->On("rollout", Task::kLmGenerate, rollout_->Generate());
    actors_->On("rollout", Task::kLoadWeights, rollout_->LoadWeights());
    actors_->On("reward", Task::kScore, ScoreScript([](const reward::Sample& s) {
                  return reward::SampleScore::Ok(s.response == s.answer ? 1.0 : 0.0);
                }));
  }

  // Starts the actors and the loop the dispatcher deals for.
  void Start() {
    ASSERT_TRUE(actors_->Start().ok());
    ctx_ = std::make_unique<FakeJobContext>(*actors_, config_, root_);
    auto text = LoadTaskText(config_, 0);
    ASSERT_TRUE(text.ok()) << text.status();
    text_ = std::make_unique<TaskText>(std::move(*text));
    loop_ = std::make_unique<LmLoop>(*ctx_, *text_);
    SamplingParams p;
    p.n = 2;
    p.max_tokens = 6;
    p.seed = 7;
    p.stream_groups = 1;
    dispatcher_ = std::make_unique<RolloutDispatcher>(*loop_, p, GetParam());
  }

  std::vector<PromptExample> Examples(uint64_t offset) const {
    return text_->TrainBatch(1, offset, 4);
  }

  // Every group of `s` in example order, with the ids dealt, and each reward the exact score.
  void ExpectWhole(const Scored& s, const std::vector<PromptExample>& examples, int64_t first) {
    ASSERT_EQ(s.groups.size(), examples.size());
    for (size_t i = 0; i < s.groups.size(); ++i) {
      EXPECT_EQ(s.groups[i].request_id, first + static_cast<int64_t>(i));
      EXPECT_EQ(PromptText(*tok_, s.groups[i].prompt), examples[i].prompt);
      EXPECT_EQ(s.rewards[2 * i], 1.0) << "group " << i;
      EXPECT_EQ(s.rewards[2 * i + 1], 0.0) << "group " << i;
    }
    EXPECT_EQ(s.metrics.at("reward/total/sum"), 4.0);
  }

  std::string root_;
  JobConfig config_;
  std::unique_ptr<models::Tokenizer> tok_;
  models::PromptTemplate tmpl_ = *models::PromptTemplate::Create("none");
  std::unique_ptr<FakeActors> actors_;
  std::unique_ptr<FakeLmRollout> rollout_;
  std::unique_ptr<FakeJobContext> ctx_;
  std::unique_ptr<TaskText> text_;
  std::unique_ptr<LmLoop> loop_;
  std::unique_ptr<RolloutDispatcher> dispatcher_;
};

// Two batches in flight at once: each comes back whole and in example order, over both
// engines; until taken, each is listed in flight with its ids (what a checkpoint records).
TEST_P(RolloutDispatcherTest, TwoBatchesInFlightComeBackWholeRoutedByRequestId) {
  Start();
  const auto first = Examples(0), second = Examples(4);
  ASSERT_TRUE(dispatcher_->Dispatch(1, first, {0, 1, 2, 3}).ok());
  ASSERT_TRUE(dispatcher_->Dispatch(2, second, {4, 5, 6, 7}).ok());
  const std::vector<InFlightBatch> in_flight = dispatcher_->InFlight();
  ASSERT_EQ(in_flight.size(), 2u);
  EXPECT_EQ(in_flight[1].batch, 2);
  EXPECT_EQ(in_flight[1].request_ids, (std::vector<int64_t>{4, 5, 6, 7}));
  ASSERT_TRUE(
      dispatcher_->ServeUntil([&] { return dispatcher_->Complete(1) && dispatcher_->Complete(2); })
          .ok());
  EXPECT_EQ(dispatcher_->owed_groups(), 0);
  auto a = dispatcher_->Take(1), b = dispatcher_->Take(2);
  ASSERT_TRUE(a.ok() && b.ok());
  ExpectWhole(*a, first, 0);
  ExpectWhole(*b, second, 4);
  EXPECT_EQ(a->metrics.at("rollout/0/groups") + a->metrics.at("rollout/1/groups"), 4);
  EXPECT_GT(a->metrics.at("rollout/1/groups"), 0) << "both engines dealt";
  EXPECT_TRUE(dispatcher_->InFlight().empty());
  EXPECT_FALSE(dispatcher_->Take(1).ok()) << "taken once";
}

// An engine lost with its groups: they are dealt again to the other with the same request ids
// (so the same seeds), the batch is whole, and the job's fault totals count them.
TEST_P(RolloutDispatcherTest, LostEnginesGroupsAreDealtAgainWithTheSameIds) {
  auto calls = std::make_shared<int>(0);
  FakeScript generate = rollout_->Generate();
  actors_->On("rollout", Task::kLmGenerate, [=, this](const FakeWork& w) {
    if (w.rank == 1 && ++*calls == 1) {
      rollout_->Forget(w.actor_id);
      return FakeReply::Crash();
    }
    return generate(w);
  });
  Start();
  const auto examples = Examples(0);
  ASSERT_TRUE(dispatcher_->Dispatch(1, examples, {10, 11, 12, 13}).ok());
  ASSERT_TRUE(dispatcher_->ServeUntil([&] { return dispatcher_->Complete(1); }).ok());
  auto s = dispatcher_->Take(1);
  ASSERT_TRUE(s.ok()) << s.status();
  ExpectWhole(*s, examples, 10);
  // The crashed engine took its share and died with it: every group was generated once, by
  // the survivor, under its own id.
  std::vector<int64_t> ids;
  for (const auto& q : rollout_->queued()) {
    ids.push_back(q.request_id);
    EXPECT_EQ(q.actor_id, actors_->Ids("rollout")[0]) << "request " << q.request_id;
  }
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<int64_t>{10, 11, 12, 13}));
  std::map<std::string, double> metrics;
  loop_->AddRequeuedMetrics(metrics);
  EXPECT_GT(metrics.at("faults/requeued_groups"), 0) << "the crashed engine's share";
  EXPECT_EQ(s->metrics.at("rollout/0/groups"), 4);
}

TEST_P(RolloutDispatcherTest, ARequestIdAlreadyInFlightOrABatchDealtTwiceIsRefused) {
  Start();
  ASSERT_TRUE(dispatcher_->Dispatch(1, Examples(0), {0, 1, 2, 3}).ok());
  absl::Status twice = dispatcher_->Dispatch(1, Examples(4), {4, 5, 6, 7});
  EXPECT_NE(twice.message().find("batch 1 twice"), std::string::npos) << twice;
  absl::Status id = dispatcher_->Dispatch(2, Examples(4), {3, 4, 5, 6});
  EXPECT_NE(id.message().find("request id 3 is in flight"), std::string::npos) << id;
}

// Staleness 0 is the synchronous loop's round; 1 the asynchronous loop's dispatcher.
INSTANTIATE_TEST_SUITE_P(Modes, RolloutDispatcherTest, ::testing::Values(0, 1),
                         [](const auto& info) {
                           return info.param == 0 ? "Synchronous" : "Asynchronous";
                         });

}  // namespace
}  // namespace rlforge::testing
