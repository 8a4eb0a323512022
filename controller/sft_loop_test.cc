// The SFT controller loop against a scripted trainer: the schedule of train, evaluate and
// save requests, what each carries, and how the record is built from the replies.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>

#include "absl/strings/str_cat.h"
#include "controller/algorithm.h"
#include "controller/fake_actors.h"
#include "nlohmann/json.hpp"

namespace rlforge::testing {
namespace {

using Task = proto::WorkRequest::TaskCase;

class SftLoopTest : public ::testing::Test {
 protected:
  // 10 steps, 4 per iteration (4, 4, 2); evaluate every 8, save every 4, both after the last.
  JobConfig Config(const std::string& extra = "") {
    return TestConfig(
        "job: {algorithm: sft, seed: 3}\n"
        "data: {source: arithmetic, max_digits: 2, heldout_examples: 20}\n"
        "sft: {steps: 10, steps_per_iteration: 4, eval_every: 8, save_every: 4}\n"
        "controller: {request_timeout_s: 30}\n" +
        extra);
  }

  absl::Status Run(const JobConfig& config) {
    auto algo = CreateAlgorithm(config);
    if (!algo.ok()) return algo.status();
    actors_ = std::make_unique<FakeActors>(config);
    actors_->AddRoles((*algo)->Roles());
    actors_->On("trainer", Task::kSftInit, [](const FakeWork&) {
      FakeReply r = FakeReply::Ok();
      (*r.result.mutable_metrics())["parameters"] = 1234;
      return r;
    });
    actors_->On("trainer", Task::kSftTrain, [](const FakeWork& w) {
      FakeReply r = FakeReply::Ok();
      const auto& t = w.request.sft_train();
      (*r.result.mutable_metrics())["loss"] = 3.0 - static_cast<double>(t.first_step()) * 0.25;
      (*r.result.mutable_metrics())["tokens"] = 100.0 * static_cast<double>(t.num_steps());
      (*r.result.mutable_metrics())["step_s"] = 0.5;
      (*r.result.mutable_metrics())["tokens_per_s"] = 1000;
      return r;
    });
    actors_->On("trainer", Task::kLmEvaluate, [this](const FakeWork&) {
      FakeReply r = FakeReply::Ok();
      (*r.result.mutable_metrics())["heldout_accuracy"] = 0.25 * static_cast<double>(++evals_);
      (*r.result.mutable_metrics())["heldout_examples"] = 20;
      return r;
    });
    actors_->On("trainer", Task::kLmSave, [](const FakeWork&) {
      FakeReply r = FakeReply::Ok();
      (*r.result.mutable_metrics())["save_s"] = 0.1;
      return r;
    });
    for (auto& [key, script] : overrides_) actors_->On(key.first, key.second, script);
    absl::Status started = actors_->Start();
    if (!started.ok()) return started;
    ctx_ = std::make_unique<FakeJobContext>(*actors_, config, FreshTestDir());
    if (resume_) ctx_->resume = &*resume_;
    return (*algo)->Run(*ctx_);
  }

  std::string Trainer() { return actors_->Ids("trainer").at(0); }

  std::unique_ptr<FakeActors> actors_;
  std::unique_ptr<FakeJobContext> ctx_;
  int evals_ = 0;
  std::map<std::pair<std::string, Task>, FakeScript> overrides_;
  std::optional<JobCheckpoint> resume_;
};

TEST_F(SftLoopTest, TrainsInChunksEvaluatesAndSavesOnSchedule) {
  ASSERT_TRUE(Run(Config()).ok());
  const std::string t = Trainer();
  EXPECT_EQ(actors_->Log(),
            (std::vector<std::string>{t + " sft_init", t + " sft_train", t + " lm_save",
                                      t + " sft_train", t + " lm_evaluate", t + " lm_save",
                                      t + " sft_train", t + " lm_evaluate", t + " lm_save"}));
  EXPECT_EQ(ctx_->total_iterations, 3);
  EXPECT_EQ(ctx_->ends_at, (std::vector<size_t>{3, 6, 9}));

  auto trains = actors_->Received(Task::kSftTrain);
  ASSERT_EQ(trains.size(), 3u);
  const std::vector<std::pair<int64_t, int64_t>> chunks = {{0, 4}, {4, 4}, {8, 2}};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(trains[i]->request.sft_train().first_step(), chunks[i].first);
    EXPECT_EQ(trains[i]->request.sft_train().num_steps(), chunks[i].second);
    EXPECT_EQ(trains[i]->request.sft_train().total_steps(), 10);
  }
  for (const FakeWork* e : actors_->Received(Task::kLmEvaluate)) {
    EXPECT_EQ(e->request.lm_evaluate().max_examples(), 20);
  }
  auto saves = actors_->Received(Task::kLmSave);
  ASSERT_EQ(saves.size(), 3u);
  const std::string run = ctx_->run_dir().path();
  EXPECT_EQ(saves[0]->request.lm_save().dir(), run + "/checkpoints/step_4");
  EXPECT_EQ(saves[1]->request.lm_save().dir(), run + "/checkpoints/step_8");
  EXPECT_EQ(saves[2]->request.lm_save().dir(), run + "/checkpoints/step_10");
}

TEST_F(SftLoopTest, RecordHoldsTheTrainersFiguresTimingsApart) {
  ASSERT_TRUE(Run(Config()).ok());
  const auto& r = ctx_->records;
  ASSERT_EQ(r.size(), 3u);
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(r[i].step, i + 1);
  EXPECT_EQ(r[0].metrics.at("loss"), 3.0);
  EXPECT_EQ(r[1].metrics.at("loss"), 2.0);
  EXPECT_EQ(r[2].metrics.at("tokens"), 200);
  EXPECT_EQ(r[0].metrics.at("optimizer_step"), 4);
  EXPECT_EQ(r[2].metrics.at("optimizer_step"), 10);
  EXPECT_FALSE(r[0].metrics.contains("heldout_accuracy"));
  EXPECT_EQ(r[1].metrics.at("heldout_accuracy"), 0.25);
  EXPECT_EQ(r[2].metrics.at("heldout_accuracy"), 0.5);
  for (const char* k : {"step_s", "tokens_per_s", "save_s", "iteration_s"}) {
    EXPECT_TRUE(r[2].timings.contains(k)) << k;
    EXPECT_FALSE(r[2].metrics.contains(k)) << k;
  }
}

TEST_F(SftLoopTest, FailedEvaluationStopsTheJobNamingTheTrainer) {
  overrides_[{"trainer", Task::kLmEvaluate}] = [](const FakeWork&) {
    return FakeReply::Fail("held-out prompt 3 is longer than the model's context");
  };
  absl::Status s = Run(Config());
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_NE(s.message().find("failed on " + Trainer() +
                             ": held-out prompt 3 is longer than the model's context"),
            std::string::npos)
      << s;
  EXPECT_EQ(ctx_->records.size(), 1u);
  EXPECT_EQ(actors_->Received(Task::kLmSave).size(), 1u) << "no save after the failure";
}

TEST_F(SftLoopTest, SaveThatNeverFinishesHitsTheDeadline) {
  overrides_[{"trainer", Task::kLmSave}] = [](const FakeWork&) { return FakeReply::Never(); };
  absl::Status s = Run(Config());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("actor " + Trainer()), std::string::npos) << s;
  EXPECT_NE(s.message().find("within 30 s (controller.request_timeout_s)"), std::string::npos) << s;
  EXPECT_TRUE(ctx_->records.empty());
}

TEST_F(SftLoopTest, EveryTrainerRankGetsEveryRequestAndTheRecordIsRankZeros) {
  // Rank 1 reports other figures: only rank 0's may reach the record.
  overrides_[{"trainer", Task::kSftTrain}] = [](const FakeWork& w) {
    FakeReply r = FakeReply::Ok();
    (*r.result.mutable_metrics())["loss"] = w.rank == 0 ? 1.5 : 99.0;
    return r;
  };
  ASSERT_TRUE(Run(Config("trainer: {ranks: 2}\n")).ok());
  const std::vector<std::string> ids = actors_->Ids("trainer");
  ASSERT_EQ(ids.size(), 2u);
  std::vector<std::string> expected;
  for (const char* kind : {"sft_init", "sft_train", "lm_save", "sft_train", "lm_evaluate",
                           "lm_save", "sft_train", "lm_evaluate", "lm_save"}) {
    for (const std::string& id : ids) expected.push_back(id + " " + kind);
  }
  EXPECT_EQ(actors_->Log(), expected) << "each request to every rank, in rank order";
  const auto& got = actors_->received();
  for (size_t i = 0; i + 1 < got.size(); i += 2) {
    EXPECT_EQ(got[i].rank, 0);
    EXPECT_EQ(got[i + 1].rank, 1);
    EXPECT_TRUE(SameWork(got[i], got[i + 1]));
  }
  ASSERT_EQ(ctx_->records.size(), 3u);
  for (const IterationRecord& r : ctx_->records) EXPECT_EQ(r.metrics.at("loss"), 1.5);
  // The fake counts every rank's evaluation: rank 0 answers the 1st and 3rd, rank 1 the others.
  EXPECT_EQ(ctx_->records[1].metrics.at("heldout_accuracy"), 0.25);
  EXPECT_EQ(ctx_->records[2].metrics.at("heldout_accuracy"), 0.75);
}

TEST_F(SftLoopTest, FailureOnRankOneStopsTheJobNamingRankOne) {
  // Rank 0 never answers (it would wait in a collective for rank 1): the job must stop on rank
  // 1's error at once, not on rank 0's deadline.
  overrides_[{"trainer", Task::kSftTrain}] = [](const FakeWork& w) {
    return w.rank == 1 ? FakeReply::Fail("out of memory in the shard's optimiser step")
                       : FakeReply::Never();
  };
  absl::Status s = Run(Config("trainer: {ranks: 2}\n"));
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_NE(s.message().find("failed on " + actors_->Ids("trainer").at(1) +
                             ": out of memory in the shard's optimiser step"),
            std::string::npos)
      << s;
  EXPECT_TRUE(ctx_->records.empty());
  EXPECT_EQ(actors_->Received(Task::kSftTrain).size(), 2u) << "one request, both ranks";
}

// checkpoint.every 1 on 2 ranks: after each iteration's record, every rank gets save_state
// into the step's state/trainer, then controller.json (with the optimizer step) and the
// manifest are written.
TEST_F(SftLoopTest, CheckpointsTheTrainerRanksAfterEachIteration) {
  overrides_[{"trainer", Task::kSaveState}] = [](const FakeWork&) { return FakeReply::Ok(); };
  const absl::Status s = Run(Config("trainer: {ranks: 2}\ncheckpoint: {every: 1, keep: 5}\n"));
  ASSERT_TRUE(s.ok()) << s;
  const std::vector<std::string> ids = actors_->Ids("trainer");
  std::vector<std::string> expected;
  for (const char* kind :
       {"sft_init", "sft_train", "lm_save", "save_state", "sft_train", "lm_evaluate", "lm_save",
        "save_state", "sft_train", "lm_evaluate", "lm_save", "save_state"}) {
    for (const std::string& id : ids) expected.push_back(id + " " + kind);
  }
  EXPECT_EQ(actors_->Log(), expected);
  const std::string run = ctx_->run_dir().path();
  auto saves = actors_->Received(Task::kSaveState);
  ASSERT_EQ(saves.size(), 6u);
  EXPECT_EQ(saves[4]->request.save_state().dir(), run + "/checkpoints/step_3/state/trainer");
  std::ifstream in(run + "/checkpoints/step_3/state/controller.json");
  const nlohmann::json c = nlohmann::json::parse(in, nullptr, false);
  EXPECT_EQ(c, (nlohmann::json{{"iteration", 3}, {"optimizer_step", 10}}));
  EXPECT_TRUE(std::filesystem::exists(run + "/checkpoints/step_3/state/manifest.json"));
}

// Resumed after iteration 1 (4 of 10 steps): sft_init, load_state from the checkpoint, and
// training goes on at step 4 with iteration 2's record.
TEST_F(SftLoopTest, ResumedJobLoadsTheTrainerAndContinuesAtTheSavedStep) {
  resume_ = JobCheckpoint{1, "/ckpt/step_1/state", {{"iteration", 1}, {"optimizer_step", 4}}};
  overrides_[{"trainer", Task::kLoadState}] = [](const FakeWork&) {
    FakeReply r = FakeReply::Ok();
    (*r.result.mutable_metrics())["optimizer_step"] = 4;
    return r;
  };
  ASSERT_TRUE(Run(Config()).ok());
  const std::string t = Trainer();
  EXPECT_EQ(actors_->Log(),
            (std::vector<std::string>{t + " sft_init", t + " load_state", t + " sft_train",
                                      t + " lm_evaluate", t + " lm_save", t + " sft_train",
                                      t + " lm_evaluate", t + " lm_save"}));
  EXPECT_EQ(actors_->Received(Task::kLoadState)[0]->request.load_state().dir(),
            "/ckpt/step_1/state/trainer");
  EXPECT_EQ(actors_->Received(Task::kSftTrain)[0]->request.sft_train().first_step(), 4);
  ASSERT_EQ(ctx_->records.size(), 2u);
  EXPECT_EQ(ctx_->records[0].step, 2);
  EXPECT_EQ(ctx_->records[1].metrics.at("optimizer_step"), 10);
}

TEST_F(SftLoopTest, ResumeRefusesATrainerThatRestoredAnotherStep) {
  resume_ = JobCheckpoint{1, "/ckpt/step_1/state", {{"iteration", 1}, {"optimizer_step", 4}}};
  overrides_[{"trainer", Task::kLoadState}] = [](const FakeWork&) {
    FakeReply r = FakeReply::Ok();
    (*r.result.mutable_metrics())["optimizer_step"] = 3;
    return r;
  };
  absl::Status s = Run(Config());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("/ckpt/step_1/state: the trainer restored optimizer step 3, "
                             "controller.json says 4"),
            std::string::npos)
      << s;
  EXPECT_TRUE(ctx_->records.empty());
}

}  // namespace
}  // namespace rlforge::testing
