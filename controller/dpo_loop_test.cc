// The DPO controller loop against scripted actors: the trainer fake receives preference
// pairs and publishes version = step; rollout and reward fakes serve only the held-out
// evaluation, which must run on the trainer's latest version.
#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "controller/algorithm.h"
#include "controller/fake_actors.h"
#include "controller/fake_lm_actors.h"
#include "data/arith_task.h"
#include "nlohmann/json.hpp"

namespace rlforge::testing {
namespace {

using Task = proto::WorkRequest::TaskCase;

class DpoLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = FreshTestDir();
    WriteTokenizerCheckpoint(root_ + "/model");
    auto tok = models::LoadTokenizer(root_ + "/model");
    ASSERT_TRUE(tok.ok()) << tok.status();
    tok_ = std::move(*tok);
  }

  // 3 pairs per iteration, 4 iterations; 3 held-out prompts at the start, every 2 iterations
  // and after the last.
  JobConfig Config(const std::string& extra = "") {
    return TestConfig(absl::StrCat(
        "job: {algorithm: dpo, seed: 1, iterations: 4}\n", "model: {path: ", root_, "/model}\n",
        "data: {source: arithmetic, min_digits: 1, max_digits: 2, ops: ['+']}\n",
        "controller: {request_timeout_s: 30}\n",
        "dpo: {pairs_per_iteration: 3, eval_every: 2, eval_examples: 3, max_new_tokens: 6}\n",
        extra));
  }

  absl::Status Run(const JobConfig& config) {
    auto algo = CreateAlgorithm(config);
    if (!algo.ok()) return algo.status();
    actors_ = std::make_unique<FakeActors>(config);
    actors_->AddRoles((*algo)->Roles());
    // Greedy answers: right when the answer is even, and always from version 4 on.
    rollout_ = std::make_unique<FakeLmRollout>(
        *tok_, tmpl_, [this](const std::string& prompt, const proto::LmGenerate&, int64_t) {
          const std::string answer = PlainAnswer(prompt);
          const bool right = std::stoi(answer) % 2 == 0 || rollout_->version() >= 4;
          return right ? answer : answer + "0";
        });
    actors_->On("rollout", Task::kLmGenerate, rollout_->Generate());
    actors_->On("rollout", Task::kLoadWeights, rollout_->LoadWeights());
    actors_->On("reward", Task::kScore, ScoreScript([](const reward::Sample& s) {
                  return reward::SampleScore::Ok(s.response == s.answer ? 1.0 : 0.0);
                }));
    actors_->On("trainer", Task::kPublishWeights, PublishReply);
    actors_->On("trainer", Task::kDpoTrain, [](const FakeWork& w) {
      FakeReply r = WeightsReply(w.request.dpo_train().step());
      (*r.result.mutable_metrics())["dpo/margin"] =
          0.1 * static_cast<double>(w.request.dpo_train().step());
      (*r.result.mutable_metrics())["pairs"] = 3;
      return r;
    });
    for (auto& [key, script] : overrides_) actors_->On(key.first, key.second, script);
    absl::Status started = actors_->Start();
    if (!started.ok()) return started;
    ctx_ = std::make_unique<FakeJobContext>(*actors_, config, root_);
    if (resume_) ctx_->resume = &*resume_;
    return (*algo)->Run(*ctx_);
  }

  std::string Id(const std::string& role) { return actors_->Ids(role).at(0); }
  // A sample's text without its eos.
  std::string Text(const LmSample& s) {
    return tok_->Decode(std::vector<int32_t>(s.tokens.begin(), s.tokens.end() - 1));
  }

  std::string root_;
  std::unique_ptr<models::Tokenizer> tok_;
  models::PromptTemplate tmpl_ = *models::PromptTemplate::Create("none");
  std::unique_ptr<FakeActors> actors_;
  std::unique_ptr<FakeLmRollout> rollout_;
  std::unique_ptr<FakeJobContext> ctx_;
  std::map<std::pair<std::string, Task>, FakeScript> overrides_;
  std::optional<JobCheckpoint> resume_;
};

// The prompts of each pair dpo_train `w` carried.
std::vector<std::string> PairPrompts(const models::Tokenizer& tok, const FakeWork& w) {
  std::vector<std::string> out;
  auto pairs = GroupsFromFrames(w.tensors, true, 2);
  EXPECT_TRUE(pairs.ok()) << pairs.status();
  if (pairs.ok()) {
    for (const LmGroup& p : *pairs) out.push_back(PromptText(tok, p.prompt));
  }
  return out;
}

TEST_F(DpoLoopTest, TrainsEveryIterationAndSyncsOnlyToEvaluate) {
  ASSERT_TRUE(Run(Config()).ok());
  const std::string gen = Id("rollout") + " lm_generate", load = Id("rollout") + " load_weights";
  const std::string score = Id("reward") + " score", train = Id("trainer") + " dpo_train";
  // The trainer streams the version while the engine loads it (weights.transport shm).
  const std::string publish = Id("trainer") + " publish_weights";
  EXPECT_EQ(actors_->Log(),
            (std::vector<std::string>{gen, score, train, train, publish, load, gen, score, train,
                                      train, publish, load, gen, score}));
  ASSERT_EQ(ctx_->records.size(), 5u);
  EXPECT_EQ(ctx_->ends_at, (std::vector<size_t>{2, 3, 8, 9, 14}));
  auto loads = actors_->Received(Task::kLoadWeights);
  ASSERT_EQ(loads.size(), 2u);
  EXPECT_EQ(loads[0]->request.load_weights().weights().version(), 2);
  EXPECT_EQ(loads[1]->request.load_weights().weights().version(), 4);
}

TEST_F(DpoLoopTest, TrainerGetsChosenTrueAnswersAndCarrylessRejections) {
  ASSERT_TRUE(Run(Config()).ok());
  auto trains = actors_->Received(Task::kDpoTrain);
  ASSERT_EQ(trains.size(), 4u);
  std::set<std::string> prompts;
  for (size_t it = 0; it < trains.size(); ++it) {
    EXPECT_EQ(trains[it]->request.dpo_train().step(), static_cast<int64_t>(it) + 1);
    auto pairs = GroupsFromFrames(trains[it]->tensors, true, 2);
    ASSERT_TRUE(pairs.ok()) << pairs.status();
    ASSERT_EQ(pairs->size(), 3u);
    double carryless = 0;
    for (size_t i = 0; i < pairs->size(); ++i) {
      const LmGroup& p = (*pairs)[i];
      EXPECT_EQ(p.request_id, static_cast<int64_t>(i));
      const std::string prompt = PromptText(*tok_, p.prompt);
      prompts.insert(prompt);
      int a = 0, b = 0;
      ASSERT_EQ(std::sscanf(prompt.c_str(), "%d+%d=", &a, &b), 2) << prompt;
      const std::string chosen = Text(p.samples[0]), rejected = Text(p.samples[1]);
      EXPECT_EQ(chosen, std::to_string(a + b)) << prompt;
      EXPECT_NE(rejected, chosen) << prompt;
      const int64_t dropped = ArithmeticTask::CarrylessValue(a, b, "+");
      if (dropped != a + b) {
        EXPECT_EQ(rejected, std::to_string(dropped)) << prompt << ": a carry, dropped";
        ++carryless;
      }
      for (const LmSample& s : p.samples) {
        EXPECT_EQ(s.versions, std::vector<int64_t>(s.tokens.size(), -1)) << "offline data";
        EXPECT_TRUE(s.stopped);
      }
    }
    const IterationRecord& rec = ctx_->records[it + 1];
    EXPECT_DOUBLE_EQ(rec.metrics.at("carryless_rejected_fraction"), carryless / 3);
    EXPECT_EQ(rec.metrics.at("policy_version"), static_cast<double>(it + 1));
    EXPECT_DOUBLE_EQ(rec.metrics.at("dpo/margin"), 0.1 * static_cast<double>(it + 1));
  }
  EXPECT_EQ(prompts.size(), 12u) << "fresh pairs every iteration";
  EXPECT_EQ(ctx_->samples.size(), 4u * 4) << "both sides of 2 pairs per iteration";
}

TEST_F(DpoLoopTest, EvaluationScoresTheTrainersLatestVersion) {
  ASSERT_TRUE(Run(Config()).ok());
  auto gens = actors_->Received(Task::kLmGenerate);
  ASSERT_EQ(gens.size(), 3u);
  double even = 0;
  auto heldout = GroupsFromFrames(gens[0]->tensors, false, 0);
  ASSERT_TRUE(heldout.ok());
  ASSERT_EQ(heldout->size(), 3u);
  for (const LmGroup& g : *heldout) {
    even += std::stoi(PlainAnswer(PromptText(*tok_, g.prompt))) % 2 == 0;
  }
  ASSERT_TRUE(even > 0 && even < 3) << "the test needs held-out answers of both parities";
  const auto& r = ctx_->records;
  EXPECT_DOUBLE_EQ(r[0].metrics.at("heldout_accuracy"), even / 3);
  EXPECT_DOUBLE_EQ(r[2].metrics.at("heldout_accuracy"), even / 3) << "version 2";
  EXPECT_EQ(r[4].metrics.at("heldout_accuracy"), 1.0) << "version 4";
  EXPECT_EQ(r[4].metrics.at("heldout_examples"), 3);
  EXPECT_FALSE(r[1].metrics.contains("heldout_accuracy"));
  EXPECT_FALSE(r[3].metrics.contains("heldout_accuracy"));
}

TEST_F(DpoLoopTest, FailedUpdateNamesTheTrainer) {
  overrides_[{"trainer", Task::kDpoTrain}] = [](const FakeWork&) {
    return FakeReply::Fail("reference logprobs are NaN");
  };
  absl::Status s = Run(Config());
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_NE(s.message().find("failed on " + Id("trainer") + ": reference logprobs are NaN"),
            std::string::npos)
      << s;
  EXPECT_EQ(ctx_->records.size(), 1u) << "the start evaluation only";
}

// Streamed weights: an engine whose load never finishes meets the request deadline and is
// lost (the stream does not wait for it: the shm ring goes on without a reader whose process is
// gone); with no replacement the job stops waiting for a live engine, naming its deadline.
TEST_F(DpoLoopTest, WeightLoadThatNeverFinishesHitsTheDeadline) {
  overrides_[{"rollout", Task::kLoadWeights}] = [](const FakeWork&) { return FakeReply::Never(); };
  absl::Status s = Run(Config());
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find(Id("rollout") + ": pending, 0 restart(s), last lost: did not finish"),
            std::string::npos)
      << s;
  EXPECT_NE(s.message().find("controller.request_timeout_s"), std::string::npos) << s;
  EXPECT_EQ(ctx_->records.size(), 2u);
  EXPECT_EQ(actors_->Received(Task::kLmGenerate).size(), 1u) << "no evaluation on stale weights";
}

TEST_F(DpoLoopTest, EveryTrainerRankGetsThePairsAndRankZeroPublishes) {
  // Rank 1 replies with another version and margin: neither may reach the rollout or the record.
  overrides_[{"trainer", Task::kDpoTrain}] = [](const FakeWork& w) {
    const int64_t step = w.request.dpo_train().step();
    FakeReply r = WeightsReply(w.rank == 0 ? step : 100 + step);
    (*r.result.mutable_metrics())["dpo/margin"] = w.rank == 0 ? 0.5 : -7.0;
    return r;
  };
  ASSERT_TRUE(Run(Config("trainer: {ranks: 3}\n")).ok());
  const std::vector<std::string> ids = actors_->Ids("trainer");
  ASSERT_EQ(ids.size(), 3u);
  auto trains = actors_->Received(Task::kDpoTrain);
  ASSERT_EQ(trains.size(), 4u * 3);
  for (size_t i = 0; i < trains.size(); ++i) {
    EXPECT_EQ(trains[i]->actor_id, ids[i % 3]) << "rank order";
    EXPECT_EQ(trains[i]->request.dpo_train().step(), static_cast<int64_t>(i / 3) + 1);
    EXPECT_TRUE(SameWork(*trains[i - i % 3], *trains[i])) << "request " << i;
  }
  auto loads = actors_->Received(Task::kLoadWeights);
  ASSERT_EQ(loads.size(), 2u);
  EXPECT_EQ(loads[0]->request.load_weights().weights().version(), 2);
  EXPECT_EQ(loads[1]->request.load_weights().weights().version(), 4);
  ASSERT_EQ(ctx_->records.size(), 5u);
  for (size_t it = 1; it < 5; ++it) {
    EXPECT_EQ(ctx_->records[it].metrics.at("policy_version"), static_cast<double>(it));
    EXPECT_EQ(ctx_->records[it].metrics.at("dpo/margin"), 0.5);
  }
}

TEST_F(DpoLoopTest, FailureOnRankOneStopsTheJobNamingRankOne) {
  overrides_[{"trainer", Task::kDpoTrain}] = [](const FakeWork& w) {
    if (w.rank == 1 && w.request.dpo_train().step() == 2) {
      return FakeReply::Fail("collective timed out after 60 s waiting for rank 0");
    }
    return WeightsReply(w.request.dpo_train().step());
  };
  absl::Status s = Run(Config("trainer: {ranks: 2}\n"));
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_NE(s.message().find("failed on " + actors_->Ids("trainer").at(1) +
                             ": collective timed out after 60 s waiting for rank 0"),
            std::string::npos)
      << s;
  EXPECT_EQ(ctx_->records.size(), 2u) << "the start evaluation and iteration 1";
}

// checkpoint.every 2: the trainer saves after iterations 2 and 4, controller.json holds the
// version. Resumed from step 2's checkpoint: the trainer restores, the engine loads the
// restored version, and iterations 3 and 4 train on the pairs the run that went through gave
// them, with no start evaluation.
TEST_F(DpoLoopTest, CheckpointedRunResumesOnTheSamePairs) {
  overrides_[{"trainer", Task::kSaveState}] = [](const FakeWork&) { return FakeReply::Ok(); };
  ASSERT_TRUE(Run(Config("checkpoint: {every: 2}\n")).ok());
  const std::string run = ctx_->run_dir().path();
  auto saves = actors_->Received(Task::kSaveState);
  ASSERT_EQ(saves.size(), 2u);
  EXPECT_EQ(saves[0]->request.save_state().dir(), run + "/checkpoints/step_2/state/trainer");
  std::ifstream in(run + "/checkpoints/step_2/state/controller.json");
  const nlohmann::json c = nlohmann::json::parse(in, nullptr, false);
  EXPECT_EQ(c, (nlohmann::json{{"iteration", 2}, {"policy_version", 2}}));
  auto trains = actors_->Received(Task::kDpoTrain);
  ASSERT_EQ(trains.size(), 4u);
  const std::vector<std::string> third = PairPrompts(*tok_, *trains[2]);
  const std::vector<std::string> fourth = PairPrompts(*tok_, *trains[3]);

  resume_ = JobCheckpoint{2, run + "/checkpoints/step_2/state", c};
  overrides_[{"trainer", Task::kLoadState}] = [](const FakeWork&) { return WeightsReply(2); };
  ASSERT_TRUE(Run(Config("checkpoint: {every: 2}\n")).ok());
  const std::string load = Id("rollout") + " load_weights", train = Id("trainer") + " dpo_train";
  const std::string publish = Id("trainer") + " publish_weights";
  EXPECT_EQ(actors_->Log(),
            (std::vector<std::string>{Id("trainer") + " load_state", publish, load, train, train,
                                      publish, load, Id("rollout") + " lm_generate",
                                      Id("reward") + " score", Id("trainer") + " save_state"}));
  EXPECT_EQ(actors_->Received(Task::kLoadState)[0]->request.load_state().dir(),
            run + "/checkpoints/step_2/state/trainer");
  EXPECT_EQ(actors_->Received(Task::kLoadWeights)[0]->request.load_weights().weights().version(),
            2);
  trains = actors_->Received(Task::kDpoTrain);
  ASSERT_EQ(trains.size(), 2u);
  EXPECT_EQ(trains[0]->request.dpo_train().step(), 3);
  EXPECT_EQ(PairPrompts(*tok_, *trains[0]), third);
  EXPECT_EQ(PairPrompts(*tok_, *trains[1]), fourth);
  ASSERT_EQ(ctx_->records.size(), 2u);
  EXPECT_EQ(ctx_->records[0].step, 3);
}

TEST_F(DpoLoopTest, ResumeRefusesATrainerThatRestoredAnotherVersion) {
  resume_ = JobCheckpoint{2, "/ckpt/step_2/state", {{"iteration", 2}, {"policy_version", 2}}};
  overrides_[{"trainer", Task::kLoadState}] = [](const FakeWork&) { return WeightsReply(1); };
  absl::Status s = Run(Config());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(
      s.message().find(
          "/ckpt/step_2/state: the trainer restored policy version 1, controller.json says 2"),
      std::string::npos)
      << s;
  EXPECT_TRUE(ctx_->records.empty());
}

}  // namespace
}  // namespace rlforge::testing
