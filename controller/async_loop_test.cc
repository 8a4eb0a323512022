// The asynchronous LM RL loop (rollout.max_staleness k) against scripted fakes: k = 0 is the
// synchronous loop; with k = 1 and 2 the engines generate while the trainer trains, every
// trained token lags the trainer's version by at most k (checked from every sample's versions
// in every train request), batches are dispatched no more than k steps ahead, and nothing is
// discarded; a lost engine's or reward worker's work is dealt again and every batch is whole.
// No process, socket or sleep.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "controller/algorithm.h"
#include "controller/fake_actors.h"
#include "controller/fake_lm_actors.h"
#include "controller/rollout_dispatcher.h"
#include "nlohmann/json.hpp"

namespace rlforge::testing {
namespace {

using Task = proto::WorkRequest::TaskCase;

constexpr int64_t kPrompts = 6;  // per iteration

struct Job {
  JobConfig config;
  std::unique_ptr<FakeActors> actors;
  std::unique_ptr<FakeLmRollout> rollout;
  std::unique_ptr<FakeJobContext> ctx;
  absl::Status status;
};

// `victim` (a role) of rank `rank` answers its `call`-th request of kind `task` with `fault`
// (Crash or Hang; an engine's queue goes with it); `*fault_at` is then the count of requests
// received so far.
void FaultOn(Job& j, const std::string& victim, int rank, int call, Task task, FakeScript inner,
             std::shared_ptr<size_t> fault_at, FakeReply (*fault)() = &FakeReply::Crash) {
  auto calls = std::make_shared<int>(0);
  j.actors->On(victim, task, [=, &j](const FakeWork& w) {
    if (w.rank == rank && ++*calls == call) {
      *fault_at = j.actors->received().size();
      if (victim == "rollout") j.rollout->Forget(w.actor_id);
      return fault();
    }
    return inner(w);
  });
}

FakeScript ExactScore() {
  return ScoreScript([](const reward::Sample& s) {
    return reward::SampleScore::Ok(s.response == s.answer ? 1.0 : 0.0);
  });
}

class AsyncLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = FreshTestDir();
    WriteTokenizerCheckpoint(root_ + "/model");
    auto tok = models::LoadTokenizer(root_ + "/model");
    ASSERT_TRUE(tok.ok()) << tok.status();
    tok_ = std::move(*tok);
  }

  // grpo on `workers` engines: 6 prompts x 2 samples, 5 iterations, streamed 2 groups at a
  // time; `staleness` empty leaves the key out. The trainer answers `train_pumps` pumps late
  // (a slow step), so engines that may run ahead do. `script` may replace scripts (before
  // Start).
  std::unique_ptr<Job> Run(const std::string& staleness, int workers = 1, int train_pumps = 0,
                           int64_t eval_every = 2,
                           const std::function<void(Job&)>& script = nullptr) {
    auto job = std::make_unique<Job>();
    job->config = TestConfig(absl::StrCat(
        "job: {algorithm: grpo, seed: 3, iterations: 5}\n", "model: {path: ", root_, "/model}\n",
        "data: {source: arithmetic, min_digits: 1, max_digits: 2, ops: ['+']}\n",
        "controller: {request_timeout_s: 30}\n", "rollout: {workers: ", workers,
        staleness.empty() ? "" : ", max_staleness: " + staleness, rollout_extra_, "}\n",
        "reward: {workers: ", reward_workers_, "}\n", "grpo: {prompts_per_iteration: ", kPrompts,
        ", group_size: 2, max_new_tokens: 6, eval_every: ", eval_every,
        ", eval_examples: 4, stream_groups: 2}\n", job_extra_));
    auto algo = CreateAlgorithm(job->config);
    EXPECT_TRUE(algo.ok()) << algo.status();
    if (!algo.ok()) {
      job->status = algo.status();
      return job;
    }
    job->actors = std::make_unique<FakeActors>(job->config);
    job->actors->AddRoles((*algo)->Roles());
    Job* j = job.get();
    // Right when bit j of the group's seed is set; greedy: right from version 2 on.
    job->rollout = std::make_unique<FakeLmRollout>(
        *tok_, tmpl_, [j](const std::string& prompt, const proto::LmGenerate& p, int64_t s) {
          const std::string answer = PlainAnswer(prompt);
          const bool right = p.temperature() > 0 ? ((j->rollout->group_seed() >> s) & 1) != 0
                                                 : j->rollout->version() >= 2;
          return right ? answer : answer + "1";
        });
    job->actors->On("rollout", Task::kLmGenerate, job->rollout->Generate());
    job->actors->On("rollout", Task::kLoadWeights, job->rollout->LoadWeights());
    job->actors->On("reward", Task::kScore, ExactScore());
    job->actors->On("trainer", Task::kGrpoTrain, [train_pumps](const FakeWork& w) {
      FakeReply r = WeightsReply(w.request.grpo_train().step(), "inline");
      r.delay_pumps = train_pumps;
      return r;
    });
    job->actors->On("trainer", Task::kLmSave, [](const FakeWork&) { return FakeReply::Ok(); });
    if (script) script(*job);
    job->status = job->actors->Start();
    if (!job->status.ok()) return job;
    const std::string dir = absl::StrCat(root_, "/run", runs_++);
    std::filesystem::create_directories(dir);
    job->ctx = std::make_unique<FakeJobContext>(*job->actors, job->config, dir);
    if (resume_) job->ctx->resume = &*resume_;
    job->status = (*algo)->Run(*job->ctx);
    return job;
  }

  // The groups of every train request, by step (step s trains on version s - 1: the fake
  // trainer publishes version = step).
  static std::vector<std::vector<LmGroup>> TrainBatches(const Job& job) {
    std::vector<std::vector<LmGroup>> out;
    for (const FakeWork* w : job.actors->Received(Task::kGrpoTrain)) {
      auto groups = GroupsFromFrames(w->tensors, true, 2);
      EXPECT_TRUE(groups.ok()) << groups.status();
      out.push_back(groups.ok() ? *groups : std::vector<LmGroup>{});
    }
    return out;
  }

  std::string root_;
  int runs_ = 0;
  int reward_workers_ = 1;
  std::string rollout_extra_;            // more keys of the rollout section, e.g. ", partial: true"
  std::string job_extra_;                // more sections, e.g. "checkpoint: {every: 2}\n"
  std::optional<JobCheckpoint> resume_;  // the checkpoint the next Run resumes from
  std::unique_ptr<models::Tokenizer> tok_;
  models::PromptTemplate tmpl_ = *models::PromptTemplate::Create("none");
};

TEST_F(AsyncLoopTest, StalenessZeroIsTheSynchronousLoop) {
  auto sync = Run("");
  auto zero = Run("0");
  ASSERT_TRUE(sync->status.ok()) << sync->status;
  ASSERT_TRUE(zero->status.ok()) << zero->status;
  auto a = sync->actors->Received(Task::kGrpoTrain), b = zero->actors->Received(Task::kGrpoTrain);
  ASSERT_EQ(a.size(), 5u);
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) EXPECT_TRUE(SameWork(*a[k], *b[k])) << "train " << k;
  ASSERT_EQ(sync->ctx->records.size(), zero->ctx->records.size());
  for (size_t k = 0; k < sync->ctx->records.size(); ++k) {
    EXPECT_EQ(sync->ctx->records[k].metrics, zero->ctx->records[k].metrics) << "record " << k;
  }
  // Synchronous: generation never overlaps a train step, every token is the trainer's version.
  const std::vector<std::string> log = zero->actors->Log();
  bool training = false;
  for (const std::string& line : log) {
    if (absl::EndsWith(line, "grpo_train")) training = true;
    if (absl::EndsWith(line, "load_weights")) training = false;
    EXPECT_FALSE(training && absl::EndsWith(line, "lm_generate")) << line;
  }
  for (size_t k = 1; k < zero->ctx->records.size(); ++k) {
    const auto& m = zero->ctx->records[k].metrics;
    EXPECT_EQ(m.at("version_lag/0"), 1.0);
    EXPECT_EQ(m.at("stale_groups_discarded"), 0.0);
    EXPECT_EQ(m.count("version_lag/1"), 0u);
  }
}

TEST_F(AsyncLoopTest, NoAdmittedTokenLagsBeyondTheBoundAndTheEnginesRunAhead) {
  for (int64_t k : {1, 2}) {
    for (int workers : {1, 2}) {
      SCOPED_TRACE(absl::StrCat("k ", k, ", workers ", workers));
      auto job = Run(absl::StrCat(k), workers, /*train_pumps=*/4);
      ASSERT_TRUE(job->status.ok()) << job->status;
      const auto batches = TrainBatches(*job);
      ASSERT_EQ(batches.size(), 5u);
      int64_t largest = 0;
      for (size_t s = 0; s < batches.size(); ++s) {
        const int64_t trained = static_cast<int64_t>(s);  // the trainer's version at step s+1
        EXPECT_EQ(batches[s].size(), static_cast<size_t>(kPrompts)) << "step " << s + 1;
        for (const LmGroup& g : batches[s]) {
          for (const LmSample& smp : g.samples) {
            for (int64_t v : smp.versions) {
              EXPECT_LE(v, trained) << "step " << s + 1;
              EXPECT_LE(trained - v, k) << "step " << s + 1;
              largest = std::max(largest, trained - v);
            }
          }
        }
      }
      EXPECT_EQ(largest, k) << "the engines never ran ahead of the trainer";
      for (size_t r = 1; r < job->ctx->records.size(); ++r) {
        const auto& m = job->ctx->records[r].metrics;
        EXPECT_EQ(m.at("stale_groups_discarded"), 0.0) << "record " << r;
        double shares = 0;
        for (int64_t d = 0; d <= k; ++d) shares += m.at(absl::StrCat("version_lag/", d));
        EXPECT_DOUBLE_EQ(shares, 1.0) << "record " << r;
        EXPECT_LE(m.at("policy_version_lag"), static_cast<double>(k));
      }
    }
  }
}

TEST_F(AsyncLoopTest, EnginesGenerateWhileTheTrainerTrains) {
  auto job = Run("1", 1, /*train_pumps=*/4);
  ASSERT_TRUE(job->status.ok()) << job->status;
  // Between a train request and the load of its weights the engine was asked for groups.
  const std::vector<std::string> log = job->actors->Log();
  bool training = false, overlapped = false;
  for (const std::string& line : log) {
    if (absl::EndsWith(line, "grpo_train")) training = true;
    if (absl::EndsWith(line, "load_weights")) training = false;
    overlapped = overlapped || (training && absl::EndsWith(line, "lm_generate"));
  }
  EXPECT_TRUE(overlapped);
}

TEST_F(AsyncLoopTest, ThrottleDispatchesNoBatchMoreThanKStepsAhead) {
  for (int64_t k : {1, 2}) {
    SCOPED_TRACE(absl::StrCat("k ", k));
    auto job = Run(absl::StrCat(k), 1, /*train_pumps=*/4, /*eval_every=*/0);
    ASSERT_TRUE(job->status.ok()) << job->status;
    // Groups sent to engines before step s's weights load: at most (s + k) batches' worth,
    // and more than s batches' at some step (the engines ran ahead of the trainer).
    int64_t step = 0, sent = 0, most_ahead = 0;
    for (const FakeWork& w : job->actors->received()) {
      if (w.kind() == "grpo_train") ++step;
      if (w.kind() == "load_weights" && step > 0) {
        EXPECT_LE(sent, (step + k) * kPrompts) << "step " << step;
        most_ahead = std::max(most_ahead, sent - step * kPrompts);
      }
      if (w.kind() == "lm_generate" && w.request.lm_generate().temperature() > 0) {
        const TensorFrame* ids = w.Tensor("request_ids");
        sent += ids == nullptr ? 0 : ids->numel();
      }
    }
    EXPECT_EQ(step, 5);
    EXPECT_GT(most_ahead, 0) << "nothing was generated ahead of training";
  }
}

// Every train request of `faulted` holds each of its batch's prompts' groups exactly once, in
// prompt order (request ids are run-wide: batch s holds ids s x kPrompts ...), with the
// samples and rewards of `clean` (the same seeds), and no token beyond the bound k.
void ExpectWholeBatchesWithinTheBound(const Job& clean, const Job& faulted, int64_t k) {
  auto a = clean.actors->Received(Task::kGrpoTrain), b = faulted.actors->Received(Task::kGrpoTrain);
  ASSERT_EQ(b.size(), 5u);
  ASSERT_EQ(a.size(), b.size());
  for (size_t s = 0; s < b.size(); ++s) {
    auto want = GroupsFromFrames(a[s]->tensors, true, 2),
         got = GroupsFromFrames(b[s]->tensors, true, 2);
    ASSERT_TRUE(want.ok() && got.ok()) << "step " << s + 1;
    ASSERT_EQ(got->size(), static_cast<size_t>(kPrompts)) << "step " << s + 1;
    for (size_t i = 0; i < got->size(); ++i) {
      const LmGroup& g = (*got)[i];
      EXPECT_EQ(g.request_id, static_cast<int64_t>(s) * kPrompts + static_cast<int64_t>(i));
      ASSERT_EQ(g.samples.size(), (*want)[i].samples.size());
      for (size_t j = 0; j < g.samples.size(); ++j) {
        EXPECT_EQ(g.samples[j].tokens, (*want)[i].samples[j].tokens) << "step " << s + 1;
        for (int64_t v : g.samples[j].versions) {
          EXPECT_LE(v, static_cast<int64_t>(s)) << "step " << s + 1;
          EXPECT_LE(static_cast<int64_t>(s) - v, k) << "step " << s + 1;
        }
      }
    }
    const TensorFrame* rw = a[s]->Tensor("rewards");
    const TensorFrame* rg = b[s]->Tensor("rewards");
    ASSERT_TRUE(rw != nullptr && rg != nullptr);
    EXPECT_EQ(rw->ToVector<float>(), rg->ToVector<float>()) << "step " << s + 1;
  }
  for (size_t r = 1; r < faulted.ctx->records.size(); ++r) {
    EXPECT_EQ(faulted.ctx->records[r].metrics.at("stale_groups_discarded"), 0.0) << r;
  }
}

// The kinds of the requests `actor` received from the fault on.
std::vector<std::string> KindsAfter(const Job& j, size_t fault_at, const std::string& actor) {
  std::vector<std::string> kinds;
  for (size_t k = fault_at; k < j.actors->received().size(); ++k) {
    const FakeWork& w = j.actors->received()[k];
    if (w.actor_id == actor) kinds.push_back(w.kind());
  }
  return kinds;
}

TEST_F(AsyncLoopTest, LostEngineHasItsGroupsDealtAgainAndEveryBatchIsWhole) {
  // With two engines the survivor takes the groups; with one they wait for the replacement.
  for (int workers : {2, 1}) {
    SCOPED_TRACE(absl::StrCat("workers ", workers));
    auto clean = Run("1", workers, /*train_pumps=*/4);
    ASSERT_TRUE(clean->status.ok()) << clean->status;
    auto fault_at = std::make_shared<size_t>(0);
    // The last engine dies on its 7th generation request (past the first weight load).
    auto faulted = Run("1", workers, 4, 2, [&](Job& j) {
      j.actors->set_rejoin(true);
      FaultOn(j, "rollout", workers - 1, 7, Task::kLmGenerate, j.rollout->Generate(), fault_at);
    });
    ASSERT_TRUE(faulted->status.ok()) << faulted->status;
    ASSERT_GT(*fault_at, 0u);
    ExpectWholeBatchesWithinTheBound(*clean, *faulted, 1);
    const Controller& c = faulted->actors->controller();
    EXPECT_EQ(c.faults().actors_lost, 1u);
    EXPECT_GE(c.faults().works_given_back, 1u);  // its generation (and a load sent meanwhile)
    EXPECT_EQ(faulted->actors->rejoins(), 1);
    const auto& last = faulted->ctx->records.back().metrics;
    EXPECT_GT(last.at("faults/requeued_groups"), 0) << "the groups it owed, dealt again";
    EXPECT_EQ(last.at("faults/requeued_scores"), 0);
    // The replacement loaded the current weights before its first prompts.
    const auto after =
        KindsAfter(*faulted, *fault_at, faulted->actors->Ids("rollout")[workers - 1]);
    ASSERT_FALSE(after.empty());
    EXPECT_EQ(after.front(), "load_weights");
  }
}

// Issue 42, asynchronously: with weights.transport shm the only engine's loss failed the job
// (the ring had carried the current version once). The replacement now loads the current
// version, streamed again to it alone once the trainer is idle (a stream waits for the
// trainer's step), and every batch is whole, within the bound. The engine dies at several
// points: while the trainer trains, and while it waits for a batch.
TEST_F(AsyncLoopTest, LosingTheOnlyEngineOnTheShmRingStreamsTheCurrentVersionToItsReplacement) {
  auto ring = [](Job& j) {
    j.actors->On("trainer", Task::kGrpoTrain, [](const FakeWork& w) {
      FakeReply r = WeightsReply(w.request.grpo_train().step(), "shm-ring:/fake");
      r.delay_pumps = 4;
      return r;
    });
    j.actors->On("trainer", Task::kPublishWeights, RingPublishReply());
  };
  auto clean = Run("1", 1, 4, 2, ring);
  ASSERT_TRUE(clean->status.ok()) << clean->status;
  for (int call : {4, 7, 10, 13}) {
    SCOPED_TRACE(absl::StrCat("lost on generation request ", call));
    auto fault_at = std::make_shared<size_t>(0);
    auto faulted = Run("1", 1, 4, 2, [&](Job& j) {
      ring(j);
      j.actors->set_rejoin(true);
      FaultOn(j, "rollout", 0, call, Task::kLmGenerate, j.rollout->Generate(), fault_at);
    });
    ASSERT_TRUE(faulted->status.ok()) << faulted->status;
    ASSERT_GT(*fault_at, 0u);
    ExpectWholeBatchesWithinTheBound(*clean, *faulted, 1);
    ExpectEveryStreamReadByItsReaders(*faulted->actors);
    EXPECT_EQ(faulted->actors->controller().faults().actors_lost, 1u);
    EXPECT_EQ(faulted->actors->rejoins(), 1);
  }
}

// An engine that heartbeats but never answers meets the request deadline
// (controller.request_timeout_s); with no replacement the other engine generates the rest.
TEST_F(AsyncLoopTest, HungEngineMeetsTheRequestDeadlineAndItsGroupsMoveOn) {
  auto clean = Run("1", 2, /*train_pumps=*/4);
  ASSERT_TRUE(clean->status.ok()) << clean->status;
  auto fault_at = std::make_shared<size_t>(0);
  auto faulted = Run("1", 2, 4, 2, [&](Job& j) {
    FaultOn(j, "rollout", 0, 5, Task::kLmGenerate, j.rollout->Generate(), fault_at,
            &FakeReply::Hang);
  });
  ASSERT_TRUE(faulted->status.ok()) << faulted->status;
  ASSERT_GT(*fault_at, 0u);
  ExpectWholeBatchesWithinTheBound(*clean, *faulted, 1);
  EXPECT_EQ(faulted->actors->controller().faults().actors_lost, 1u);
  EXPECT_EQ(faulted->actors->rejoins(), 0);
  EXPECT_GT(faulted->ctx->records.back().metrics.at("faults/requeued_groups"), 0);
  // From the fault on, rollout-0 was asked for nothing more.
  const auto after = KindsAfter(*faulted, *fault_at, faulted->actors->Ids("rollout")[0]);
  EXPECT_TRUE(std::none_of(after.begin(), after.end(), [](const std::string& k) {
    return k == "lm_generate";
  })) << after.size();
}

TEST_F(AsyncLoopTest, LostRewardWorkerHasItsChunkScoredByAnother) {
  reward_workers_ = 2;
  auto clean = Run("1", 2, /*train_pumps=*/4);
  ASSERT_TRUE(clean->status.ok()) << clean->status;
  auto fault_at = std::make_shared<size_t>(0);
  auto faulted = Run("1", 2, 4, 2, [&](Job& j) {
    FaultOn(j, "reward", 0, 3, Task::kScore, ExactScore(), fault_at);
  });
  ASSERT_TRUE(faulted->status.ok()) << faulted->status;
  ASSERT_GT(*fault_at, 0u);
  ExpectWholeBatchesWithinTheBound(*clean, *faulted, 1);
  const Controller& c = faulted->actors->controller();
  EXPECT_EQ(c.faults().actors_lost, 1u);
  // Every chunk it held (the one it died on, and any sent before it was declared dead) is
  // scored again.
  EXPECT_GE(c.faults().works_given_back, 1u);
  EXPECT_EQ(faulted->ctx->records.back().metrics.at("faults/requeued_scores"),
            static_cast<double>(c.faults().works_given_back));
  EXPECT_EQ(faulted->ctx->records.back().metrics.at("faults/requeued_groups"), 0);
  // reward-0 took no work after it died; each record's rewards are those of the clean run.
  EXPECT_TRUE(KindsAfter(*faulted, *fault_at, faulted->actors->Ids("reward")[0]).empty());
  for (size_t r = 1; r < clean->ctx->records.size(); ++r) {
    EXPECT_EQ(clean->ctx->records[r].metrics.at("reward_mean"),
              faulted->ctx->records[r].metrics.at("reward_mean"))
        << r;
  }
}

// rollout.partial: engines take each load at once, so a group they started before it continues
// under the new weights and its samples span two versions. The admission rule still holds every
// token (its oldest one) within k of the trained version, and nothing is discarded.
TEST_F(AsyncLoopTest, PartialRolloutsSpanTwoVersionsAndNoAdmittedTokenLagsBeyondTheBound) {
  rollout_extra_ = ", partial: true";
  for (int64_t k : {1, 2}) {
    SCOPED_TRACE(absl::StrCat("k ", k));
    // One engine holds k + 1 batches at once and answers 2 groups a request, and the trainer
    // answers at once, so loads land while groups wait in the engine's queue.
    auto job =
        Run(absl::StrCat(k), 1, /*train_pumps=*/0, 2, [](Job& j) { j.rollout->set_partial(true); });
    ASSERT_TRUE(job->status.ok()) << job->status;
    ASSERT_TRUE(job->config.rollout.partial);
    const auto batches = TrainBatches(*job);
    ASSERT_EQ(batches.size(), 5u);
    int64_t spanning = 0;
    for (size_t s = 0; s < batches.size(); ++s) {
      const int64_t trained = static_cast<int64_t>(s);
      EXPECT_EQ(batches[s].size(), static_cast<size_t>(kPrompts)) << "step " << s + 1;
      for (const LmGroup& g : batches[s]) {
        for (const LmSample& smp : g.samples) {
          ASSERT_FALSE(smp.versions.empty());
          const auto [oldest, newest] =
              std::minmax_element(smp.versions.begin(), smp.versions.end());
          EXPECT_LE(*newest, trained) << "step " << s + 1;
          EXPECT_LE(trained - *oldest, k) << "step " << s + 1;
          spanning += *oldest != *newest ? 1 : 0;
        }
      }
    }
    EXPECT_GT(spanning, 0) << "no sample spanned a weight load";
    double recorded = 0;
    for (const auto& r : job->ctx->records) {
      recorded += r.metrics.count("partial_samples") ? r.metrics.at("partial_samples") : 0;
    }
    EXPECT_EQ(recorded, static_cast<double>(spanning));
    for (size_t r = 1; r < job->ctx->records.size(); ++r) {
      EXPECT_EQ(job->ctx->records[r].metrics.at("stale_groups_discarded"), 0.0) << r;
      EXPECT_LE(job->ctx->records[r].metrics.at("policy_version_lag"), static_cast<double>(k));
    }
  }
}

// The request ids of every group trained, step by step.
std::vector<std::vector<int64_t>> TrainedIds(const Job& job) {
  std::vector<std::vector<int64_t>> out;
  for (const FakeWork* w : job.actors->Received(Task::kGrpoTrain)) {
    auto groups = GroupsFromFrames(w->tensors, true, 2);
    EXPECT_TRUE(groups.ok()) << groups.status();
    out.emplace_back();
    for (const LmGroup& g : *groups) out.back().push_back(g.request_id);
  }
  return out;
}

// checkpoint.every 2 with rollout.max_staleness 1: the checkpoint after iteration 2 records
// batch 3, dealt while step 2 trained, with its request ids. A run resumed from it deals batch 3
// again with those ids, before anything else, and trains steps 3 to 5 on exactly the groups the
// uninterrupted run trained there: across both runs every request id is trained once, and
// every token lags the trainer by at most k.
TEST_F(AsyncLoopTest, CheckpointRecordsTheGroupsInFlightAndAResumedRunDealsThemAgainOnce) {
  job_extra_ = "checkpoint: {every: 2}\n";
  auto first = Run("1", 1, /*train_pumps=*/4, /*eval_every=*/2, [](Job& j) {
    j.actors->On("trainer", Task::kSaveState, [](const FakeWork&) { return FakeReply::Ok(); });
  });
  ASSERT_TRUE(first->status.ok()) << first->status;
  const std::string run = first->ctx->run_dir().path();
  std::ifstream in(run + "/checkpoints/step_2/state/controller.json");
  const nlohmann::json c = nlohmann::json::parse(in, nullptr, false);
  ASSERT_TRUE(c.contains("rollout")) << c.dump();
  std::vector<int64_t> batch3;
  for (int64_t i = 12; i < 18; ++i) batch3.push_back(i);
  EXPECT_EQ(c["rollout"], (nlohmann::json{{"batches", {{{"batch", 3}, {"request_ids", batch3}}}}}));
  const std::vector<std::vector<int64_t>> uninterrupted = TrainedIds(*first);
  ASSERT_EQ(uninterrupted.size(), 5u);

  resume_ = JobCheckpoint{2, run + "/checkpoints/step_2/state", c};
  auto resumed = Run("1", 1, 4, 2, [](Job& j) {
    j.actors->On("trainer", Task::kSaveState, [](const FakeWork&) { return FakeReply::Ok(); });
    j.actors->On("trainer", Task::kLoadState,
                 [](const FakeWork&) { return WeightsReply(2, "inline"); });
  });
  ASSERT_TRUE(resumed->status.ok()) << resumed->status;
  // Batch 3's groups are the first the resumed run deals, with their recorded ids.
  const auto& queued = resumed->rollout->queued();
  ASSERT_GE(queued.size(), 6u);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(queued[i].request_id, batch3[i]);
  const std::vector<std::vector<int64_t>> after = TrainedIds(*resumed);
  ASSERT_EQ(after.size(), 3u);
  std::multiset<int64_t> trained;
  for (size_t s = 0; s < 2; ++s) trained.insert(uninterrupted[s].begin(), uninterrupted[s].end());
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_EQ(after[s], uninterrupted[s + 2]) << "step " << s + 3;
    trained.insert(after[s].begin(), after[s].end());
  }
  ASSERT_EQ(trained.size(), 5u * kPrompts);
  int64_t want = 0;
  for (int64_t id : trained) EXPECT_EQ(id, want++) << "every group once, none lost";
  const std::vector<std::vector<LmGroup>> trains = TrainBatches(*resumed);
  for (size_t s = 0; s < trains.size(); ++s) {
    const int64_t step = static_cast<int64_t>(s) + 3;
    for (const LmGroup& g : trains[s]) {
      for (const LmSample& smp : g.samples) {
        for (int64_t v : smp.versions) {
          EXPECT_LE(v, step - 1);
          EXPECT_LE(step - 1 - v, 1) << "step " << step;
        }
      }
    }
  }
  ASSERT_EQ(resumed->ctx->records.size(), 3u) << "no start evaluation";
  for (size_t r = 0; r < 3; ++r) {
    const auto& m = resumed->ctx->records[r].metrics;
    EXPECT_EQ(m.at("batch/request_id_first"), static_cast<double>((r + 2) * kPrompts));
    EXPECT_EQ(m.at("batch/groups"), static_cast<double>(kPrompts));
  }
}

TEST_F(AsyncLoopTest, ResumeFromACheckpointWithoutItsGroupsInFlightIsRefusedNamingTheFile) {
  resume_ = JobCheckpoint{2, "/ckpt/step_2/state", {{"iteration", 2}, {"policy_version", 2}}};
  auto job = Run("1", 1, 0, 2, [](Job& j) {
    j.actors->On("trainer", Task::kLoadState,
                 [](const FakeWork&) { return WeightsReply(2, "inline"); });
  });
  EXPECT_EQ(job->status.code(), absl::StatusCode::kDataLoss) << job->status;
  EXPECT_NE(job->status.message().find("/ckpt/step_2/state/controller.json: no rollout.batches"),
            std::string::npos)
      << job->status;
}

// An engine joined by hand while step 1 trains loads the current weights and is dealt groups
// within one iteration; every batch is whole and within the bound.
TEST_F(AsyncLoopTest, AnEngineJoinedByHandIsDealtGroupsWithinOneIteration) {
  rollout_extra_ = ", max_workers: 2";
  auto joined = Run("1", 1, /*train_pumps=*/4, 2, [](Job& j) {
    j.actors->On("trainer", Task::kGrpoTrain, [&j](const FakeWork& w) {
      if (w.request.grpo_train().step() == 1) j.actors->Join("rollout");
      FakeReply r = WeightsReply(w.request.grpo_train().step(), "inline");
      r.delay_pumps = 4;
      return r;
    });
  });
  ASSERT_TRUE(joined->status.ok()) << joined->status;
  const auto& records = joined->ctx->records;  // step 0 (the start's evaluation), 1 .. 5
  ASSERT_EQ(records.size(), 6u);
  EXPECT_EQ(records[1].metrics.count("rollout/1/groups"), 0u) << "not there yet";
  double joiner_groups = 0;
  for (size_t r = 2; r <= 3; ++r) joiner_groups += records[r].metrics.at("rollout/1/groups");
  EXPECT_GT(joiner_groups, 0) << "dealt groups by the iteration after it joined";
  const std::vector<std::string> kinds = KindsAfter(*joined, 0, "rollout-1");
  ASSERT_FALSE(kinds.empty());
  EXPECT_EQ(kinds.front(), "load_weights");
  for (size_t r = 1; r < records.size(); ++r) {
    EXPECT_EQ(records[r].metrics.at("batch/groups"), static_cast<double>(kPrompts));
    EXPECT_EQ(records[r].metrics.at("stale_groups_discarded"), 0.0);
  }
  const Controller& c = joined->actors->controller();
  EXPECT_EQ(c.elastic().joins, 1u);
  EXPECT_EQ(c.faults().actors_lost, 0u);
}

// The synchronous loop's leave, asynchronously: an engine that leaves (SIGTERM) after its first
// chunk hands back the groups it still owed; they are dealt again to the other engine, every
// batch is whole and within the bound, and no fault is counted.
TEST_F(AsyncLoopTest, AnEngineLeavingOnSigtermHandsBackItsGroupsAndNoFaultIsCounted) {
  auto clean = Run("1", 2, /*train_pumps=*/4);
  ASSERT_TRUE(clean->status.ok()) << clean->status;
  auto left_at = std::make_shared<size_t>(0);
  auto left = Run("1", 2, 4, 2, [left_at](Job& j) {
    auto generate = j.rollout->Generate();
    j.actors->On("rollout", Task::kLmGenerate, [generate, left_at, &j](const FakeWork& w) {
      if (w.rank != 1 || *left_at > 0) return generate(w);
      FakeReply chunk = generate(w);
      j.rollout->Forget(w.actor_id);
      *left_at = j.actors->received().size();
      return FakeReply::AndLeave(std::move(chunk));
    });
  });
  ASSERT_TRUE(left->status.ok()) << left->status;
  ASSERT_GT(*left_at, 0u);
  ExpectWholeBatchesWithinTheBound(*clean, *left, 1);
  const Controller& c = left->actors->controller();
  EXPECT_EQ(c.faults().actors_lost, 0u);
  EXPECT_EQ(c.elastic().leaves, 1u);
  EXPECT_TRUE(KindsAfter(*left, *left_at, left->actors->Ids("rollout")[1]).empty())
      << "nothing is sent after it left";
  for (const IterationRecord& r : left->ctx->records) {
    EXPECT_EQ(r.metrics.count("faults/requeued_groups"), 0u) << "step " << r.step;
  }
}

TEST(AdmitFreshTest, RemovesGroupsWithATokenBeyondTheBoundAndCountsLags) {
  auto group = [](int64_t id, std::vector<int64_t> a, std::vector<int64_t> b) {
    LmGroup g;
    g.request_id = id;
    for (auto& versions : {a, b}) {
      LmSample s;
      s.versions = versions;
      s.tokens.assign(versions.size(), 7);
      s.logprobs.assign(versions.size(), -1.0f);
      g.samples.push_back(s);
    }
    return g;
  };
  Scored s;
  s.groups = {group(0, {5, 5}, {4}), group(1, {5}, {3, 5}), group(2, {6}, {5}),
              group(3, {4, 4}, {4})};
  s.examples.resize(4);
  for (int i = 0; i < 4; ++i) s.examples[i].prompt = absl::StrCat("p", i);
  s.rewards = {0, 1, 2, 3, 4, 5, 6, 7};
  std::vector<double> lags;
  // Version 5, k = 1: group 1 has a token of version 3 (lag 2), group 2 one from the future.
  EXPECT_EQ(AdmitFresh(5, 1, s, lags), 2);
  ASSERT_EQ(s.groups.size(), 2u);
  EXPECT_EQ(s.groups[0].request_id, 0);
  EXPECT_EQ(s.groups[1].request_id, 3);
  EXPECT_EQ(s.examples[1].prompt, "p3");
  EXPECT_EQ(s.rewards, (std::vector<double>{0, 1, 6, 7}));
  EXPECT_EQ(lags, (std::vector<double>{2, 4}));  // lag 0: two tokens; lag 1: four
}

}  // namespace
}  // namespace rlforge::testing
