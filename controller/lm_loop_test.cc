// The grpo / lm_ppo controller loop against scripted actors: a rollout fake that answers
// arithmetic prompts in text, a reward fake with an exact-match score, a trainer fake that
// publishes version = step. No process, socket or sleep; the fake clock only moves when
// the loop waits on a reply that is not coming.
#include "controller/lm_loop.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "controller/algorithm.h"
#include "controller/fake_actors.h"
#include "controller/fake_lm_actors.h"
#include "nlohmann/json.hpp"
#include "rlforge_paths.h"

namespace rlforge::testing {
namespace {

using Task = proto::WorkRequest::TaskCase;

// Whether the fake answers right before it learns: no carry.
bool Easy(const std::string& answer) { return std::stoi(answer) < 10; }

struct Counts {
  double correct = 0, samples = 0, tokens = 0;
};

class LmLoopTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    root_ = FreshTestDir();
    WriteTokenizerCheckpoint(root_ + "/model");
    auto tok = models::LoadTokenizer(root_ + "/model");
    ASSERT_TRUE(tok.ok()) << tok.status();
    tok_ = std::move(*tok);
  }

  // 4 prompts x 2 samples per iteration, streamed 3 groups at a time; 3 held-out prompts
  // evaluated at the start, every 2 iterations and after the last.
  JobConfig Config(const std::string& extra = "") {
    return TestConfig(absl::StrCat("job: {algorithm: ", GetParam(), ", seed: 1, iterations: 3}\n",
                                   "model: {path: ", root_, "/model}\n",
                                   "data: {source: arithmetic, min_digits: 1, max_digits: 1, "
                                   "ops: ['+']}\n",
                                   "controller: {request_timeout_s: 30}\n",
                                   "grpo: {prompts_per_iteration: 4, group_size: 2, "
                                   "max_new_tokens: 6, eval_every: 2, eval_examples: 3, "
                                   "stream_groups: 3}\n",
                                   extra));
  }

  // Sampled: sample 0 answers right, sample 1 only when the answer is easy.
  // Greedy (evaluation): right when the answer is easy, or always from version 2 on.
  std::string Respond(const std::string& prompt, const proto::LmGenerate& p, int64_t j) {
    const std::string answer = PlainAnswer(prompt);
    bool right =
        p.temperature() > 0 ? (j == 0 || Easy(answer)) : (Easy(answer) || rollout_->version() >= 2);
    return right ? answer : answer + "1";
  }

  // Builds the actors for `config`, scripts them, and runs the loop.
  absl::Status Run(const JobConfig& config) {
    auto algo = CreateAlgorithm(config);
    if (!algo.ok()) return algo.status();
    actors_ = std::make_unique<FakeActors>(config);
    actors_->AddRoles((*algo)->Roles());
    rollout_ = std::make_unique<FakeLmRollout>(
        *tok_, tmpl_, [this](const std::string& prompt, const proto::LmGenerate& p, int64_t j) {
          return Respond(prompt, p, j);
        });
    actors_->On("rollout", Task::kLmGenerate, rollout_->Generate());
    actors_->On("rollout", Task::kLoadWeights, rollout_->LoadWeights());
    actors_->On("reward", Task::kScore, ScoreScript([](const reward::Sample& s) {
                  return reward::SampleScore::Ok(s.response == s.answer ? 1.0 : 0.0);
                }));
    actors_->On("trainer", Task::kPublishWeights, PublishReply);
    actors_->On("trainer", Task::kGrpoTrain, [](const FakeWork& w) {
      FakeReply r = WeightsReply(w.request.grpo_train().step(), "inline");
      (*r.result.mutable_metrics())["loss"] =
          0.5 + static_cast<double>(w.request.grpo_train().step());
      (*r.result.mutable_metrics())["train_forward_s"] = 0.01;
      return r;
    });
    actors_->On("trainer", Task::kLmSave, [](const FakeWork&) { return FakeReply::Ok(); });
    for (auto& [key, script] : overrides_) actors_->On(key.first, key.second, script);
    absl::Status started = actors_->Start();
    if (!started.ok()) return started;
    ctx_ = std::make_unique<FakeJobContext>(*actors_, config, root_);
    return (*algo)->Run(*ctx_);
  }

  std::string Id(const std::string& role) { return actors_->Ids(role).at(0); }

  // Samples of a GrpoTrain request scored again here: each sample's text is the fake's
  // response, each reward the exact-match score of that text.
  Counts CheckTrainBatch(const FakeWork& w, int64_t n) {
    Counts c;
    auto groups = GroupsFromFrames(w.tensors, true, n);
    EXPECT_TRUE(groups.ok()) << groups.status();
    if (!groups.ok()) return c;
    const TensorFrame* rewards = w.Tensor("rewards");
    EXPECT_NE(rewards, nullptr);
    if (rewards == nullptr) return c;
    EXPECT_EQ(rewards->numel(), static_cast<int64_t>(groups->size()) * n);
    const std::vector<float> r = rewards->ToVector<float>();
    for (size_t i = 0; i < groups->size(); ++i) {
      const LmGroup& g = (*groups)[i];
      const std::string answer = PlainAnswer(PromptText(*tok_, g.prompt));
      for (int64_t j = 0; j < n; ++j) {
        const LmSample& s = g.samples[j];
        std::vector<int32_t> body(s.tokens.begin(), s.tokens.end() - 1);  // drop eos
        const bool right = tok_->Decode(body) == answer;
        EXPECT_EQ(r[i * n + j], right ? 1.0f : 0.0f) << "group " << i << " sample " << j;
        c.correct += right;
        c.samples += 1;
        c.tokens += static_cast<double>(s.tokens.size());
      }
    }
    return c;
  }

  std::string root_;
  std::unique_ptr<models::Tokenizer> tok_;
  models::PromptTemplate tmpl_ = *models::PromptTemplate::Create("none");
  std::unique_ptr<FakeActors> actors_;
  std::unique_ptr<FakeLmRollout> rollout_;
  std::unique_ptr<FakeJobContext> ctx_;
  std::map<std::pair<std::string, Task>, FakeScript> overrides_;
};

TEST_P(LmLoopTest, IterationGeneratesScoresTrainsThenSyncsAndEvaluatesOnSchedule) {
  const JobConfig config = Config();
  ASSERT_TRUE(Run(config).ok());
  const std::string gen = Id("rollout") + " lm_generate", load = Id("rollout") + " load_weights";
  const std::string score = Id("reward") + " score", train = Id("trainer") + " grpo_train";
  // 4 prompts in chunks of >= 3 groups: the second chunk is asked for before the first is
  // scored. 3 held-out prompts come back in one chunk.
  const std::vector<std::string> iteration = {gen, gen, score, score, train, load};
  const std::vector<std::string> eval = {gen, score};
  std::vector<std::string> expected = eval;
  for (int it = 1; it <= 3; ++it) {
    expected.insert(expected.end(), iteration.begin(), iteration.end());
    if (it >= 2) expected.insert(expected.end(), eval.begin(), eval.end());
  }
  expected.push_back(Id("trainer") + " lm_save");  // the final policy's checkpoint
  EXPECT_EQ(actors_->Log(), expected);
  ASSERT_EQ(ctx_->records.size(), 4u);
  EXPECT_EQ(ctx_->total_iterations, 3);
  for (int64_t step = 0; step <= 3; ++step) EXPECT_EQ(ctx_->records[step].step, step);
  // Each record closes after its own requests: the start eval (2), 6 per iteration, 2 per eval,
  // the save.
  EXPECT_EQ(ctx_->ends_at, (std::vector<size_t>{2, 8, 16, 25}));
  auto saves = actors_->Received(Task::kLmSave);
  ASSERT_EQ(saves.size(), 1u);
  EXPECT_EQ(saves[0]->request.lm_save().dir(), ctx_->run_dir().path() + "/checkpoints/step_3");
}

TEST_P(LmLoopTest, RewardWorkersShareTheChunksRoundRobin) {
  const JobConfig config =
      Config("reward: {workers: 2, rewards: [{name: exact, kind: exact_answer}]}\n");
  ASSERT_TRUE(Run(config).ok());
  const std::vector<std::string> rewarders = actors_->Ids("reward");
  ASSERT_EQ(rewarders.size(), 2u);
  const std::string gen = Id("rollout") + " lm_generate", load = Id("rollout") + " load_weights";
  const std::string train = Id("trainer") + " grpo_train";
  const std::string score0 = rewarders[0] + " score", score1 = rewarders[1] + " score";
  // Each iteration's two chunks go to one worker each; an evaluation's one chunk to the first.
  const std::vector<std::string> iteration = {gen, gen, score0, score1, train, load};
  std::vector<std::string> expected = {gen, score0};
  for (int it = 1; it <= 3; ++it) {
    expected.insert(expected.end(), iteration.begin(), iteration.end());
    if (it >= 2) expected.insert(expected.end(), {gen, score0});
  }
  expected.push_back(Id("trainer") + " lm_save");
  EXPECT_EQ(actors_->Log(), expected);
  // The trainer still gets every sample's own reward, whichever worker scored it.
  for (const FakeWork* t : actors_->Received(Task::kGrpoTrain)) CheckTrainBatch(*t, 2);
}

TEST_P(LmLoopTest, TrainerGetsEachPromptsGroupOnceWithTheRewardsScored) {
  const JobConfig config = Config();
  ASSERT_TRUE(Run(config).ok());
  auto trains = actors_->Received(Task::kGrpoTrain);
  auto gens = actors_->Received(Task::kLmGenerate);
  ASSERT_EQ(trains.size(), 3u);
  std::set<std::string> all_prompts;
  for (size_t it = 0; it < trains.size(); ++it) {
    const FakeWork& t = *trains[it];
    EXPECT_EQ(t.request.grpo_train().group_size(), 2);
    EXPECT_EQ(t.request.grpo_train().step(), static_cast<int64_t>(it) + 1);
    auto groups = GroupsFromFrames(t.tensors, true, 2);
    ASSERT_TRUE(groups.ok()) << groups.status();
    // The prompts the rollout was given this iteration, in order, each exactly once.
    auto asked = GroupsFromFrames(gens[1 + 2 * it + (it >= 2 ? 1 : 0)]->tensors, false, 0);
    ASSERT_TRUE(asked.ok());
    ASSERT_EQ(groups->size(), 4u);
    ASSERT_EQ(asked->size(), 4u);
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ((*groups)[i].request_id, static_cast<int64_t>(i));
      EXPECT_EQ((*groups)[i].prompt, (*asked)[i].prompt);
      all_prompts.insert(PromptText(*tok_, (*groups)[i].prompt));
    }
    const Counts c = CheckTrainBatch(t, 2);
    EXPECT_EQ(c.samples, 8);
    // The record's figures are the fakes' replies, summed.
    const IterationRecord& rec = ctx_->records[it + 1];
    EXPECT_DOUBLE_EQ(rec.metrics.at("reward_mean"), c.correct / c.samples);
    EXPECT_DOUBLE_EQ(rec.metrics.at("reward/exact/mean"), c.correct / c.samples);
    const double p = c.correct / c.samples;
    EXPECT_NEAR(rec.metrics.at("reward/exact/std"), std::sqrt(p - p * p), 1e-12);
    // One reward of weight 1: the total is that reward.
    EXPECT_DOUBLE_EQ(rec.metrics.at("reward/total/mean"), p);
    EXPECT_NEAR(rec.metrics.at("reward/total/std"), std::sqrt(p - p * p), 1e-12);
    EXPECT_DOUBLE_EQ(rec.metrics.at("response_length"), c.tokens / c.samples);
    EXPECT_EQ(rec.metrics.at("stopped_fraction"), 1.0);
    EXPECT_EQ(rec.metrics.at("policy_version"), static_cast<double>(it + 1));
    EXPECT_EQ(rec.metrics.at("policy_version_lag"), 0.0);
    EXPECT_EQ(rec.metrics.at("engine_preemptions"), 2.0);  // two chunks, one each
    EXPECT_EQ(rec.metrics.at("loss"), 0.5 + static_cast<double>(it + 1));
    EXPECT_EQ(rec.timings.at("train_forward_s"), 0.01);
    EXPECT_FALSE(rec.metrics.contains("train_forward_s"));
    EXPECT_DOUBLE_EQ(rec.timings.at("generate_s"), 0.5);
    // The reward worker's reward/time_s, two chunks' worth (it once read a key never sent).
    EXPECT_DOUBLE_EQ(rec.timings.at("reward_s"), 0.25);
  }
  EXPECT_EQ(all_prompts.size(), 12u) << "every iteration draws fresh training prompts";
  // Two samples of each of the first two groups are shown on the dashboard.
  EXPECT_EQ(ctx_->samples.size(), 3u * 4);
}

TEST_P(LmLoopTest, WeightsGoFromTrainerToRolloutBeforeTheNextGeneration) {
  const JobConfig config = Config();
  ASSERT_TRUE(Run(config).ok());
  auto loads = actors_->Received(Task::kLoadWeights);
  ASSERT_EQ(loads.size(), 3u);
  for (size_t i = 0; i < loads.size(); ++i) {
    const proto::WeightsReady& w = loads[i]->request.load_weights().weights();
    EXPECT_EQ(w.version(), static_cast<int64_t>(i) + 1);
    EXPECT_EQ(w.location(), "inline");
    EXPECT_EQ(w.checksum(), 1001u + i);
    const TensorFrame* bytes = loads[i]->Tensor("weights");
    ASSERT_NE(bytes, nullptr) << "the inline weights travel with LoadWeights";
    EXPECT_EQ(bytes->ToVector<float>()[0], static_cast<float>(i + 1));
  }
  // Generation after each load samples with the loaded version: no lag recorded.
  EXPECT_EQ(rollout_->version(), 3);
}

TEST_P(LmLoopTest, HeldOutAccuracyIsTheShareOfGreedyAnswersRight) {
  const JobConfig config = Config();
  ASSERT_TRUE(Run(config).ok());
  // The start evaluation saw version 0: right exactly on the easy answers.
  auto gens = actors_->Received(Task::kLmGenerate);
  auto heldout = GroupsFromFrames(gens[0]->tensors, false, 0);
  ASSERT_TRUE(heldout.ok());
  ASSERT_EQ(heldout->size(), 3u);
  EXPECT_EQ(gens[0]->request.lm_generate().temperature(), 0);
  EXPECT_EQ(gens[0]->request.lm_generate().n(), 1);
  double easy = 0;
  for (const LmGroup& g : *heldout) easy += Easy(PlainAnswer(PromptText(*tok_, g.prompt)));
  ASSERT_TRUE(easy > 0 && easy < 3) << "the test needs easy and hard held-out prompts";
  const auto& r = ctx_->records;
  EXPECT_DOUBLE_EQ(r[0].metrics.at("heldout_accuracy"), easy / 3);
  EXPECT_EQ(r[0].metrics.at("heldout_examples"), 3);
  EXPECT_DOUBLE_EQ(r[0].metrics.at("heldout_reward/exact/mean"), easy / 3);
  EXPECT_FALSE(r[1].metrics.contains("heldout_accuracy"));
  // From version 2 on the fake answers every held-out prompt right.
  EXPECT_EQ(r[2].metrics.at("heldout_accuracy"), 1.0);
  EXPECT_EQ(r[3].metrics.at("heldout_accuracy"), 1.0);
  EXPECT_TRUE(r[3].timings.contains("eval_s"));
}

TEST_P(LmLoopTest, GroupsFinishingOutOfOrderKeepTheirRewards) {
  const JobConfig config = Config();
  // Reverse the finishing order: the chunk holds the last-queued groups first.
  overrides_[{"rollout", Task::kLmGenerate}] = [this](const FakeWork& w) {
    rollout_->set_reverse_order(true);
    return rollout_->Generate()(w);
  };
  ASSERT_TRUE(Run(config).ok());
  for (const FakeWork* t : actors_->Received(Task::kGrpoTrain)) {
    auto groups = GroupsFromFrames(t->tensors, true, 2);
    ASSERT_TRUE(groups.ok());
    for (size_t i = 0; i < groups->size(); ++i) {
      EXPECT_EQ((*groups)[i].request_id, static_cast<int64_t>(i)) << "in example order";
    }
    CheckTrainBatch(*t, 2);
  }
}

TEST_P(LmLoopTest, SlowRepliesChangeNothing) {
  const JobConfig config = Config();
  overrides_[{"reward", Task::kScore}] = [](const FakeWork& w) {
    FakeReply r = ScoreScript([](const reward::Sample& s) {
      return reward::SampleScore::Ok(s.response == s.answer ? 1.0 : 0.0);
    })(w);
    r.delay_pumps = 7;
    return r;
  };
  ASSERT_TRUE(Run(config).ok());
  ASSERT_EQ(ctx_->records.size(), 4u);
  const auto trains = actors_->Received(Task::kGrpoTrain);
  for (size_t it = 0; it < trains.size(); ++it) {
    const Counts c = CheckTrainBatch(*trains[it], 2);
    EXPECT_DOUBLE_EQ(ctx_->records[it + 1].metrics.at("reward_mean"), c.correct / c.samples);
  }
}

TEST_P(LmLoopTest, ChunkSentTwiceIsTakenOnce) {
  const JobConfig config = Config();
  overrides_[{"rollout", Task::kLmGenerate}] = [this](const FakeWork& w) {
    FakeReply r = rollout_->Generate()(w);
    r.twice = true;  // an actor's retry: the controller drops the copy by work id
    return r;
  };
  ASSERT_TRUE(Run(config).ok());
  EXPECT_EQ(actors_->controller().drops().duplicate_results, rollout_->calls());
  for (const FakeWork* t : actors_->Received(Task::kGrpoTrain)) {
    EXPECT_EQ(CheckTrainBatch(*t, 2).samples, 8);
  }
}

TEST_P(LmLoopTest, FailedTrainStepStopsTheLoopNamingTheTrainer) {
  const JobConfig config = Config();
  overrides_[{"trainer", Task::kGrpoTrain}] = [](const FakeWork& w) {
    if (w.request.grpo_train().step() == 2) return FakeReply::Fail("NaN loss at step 2");
    return WeightsReply(w.request.grpo_train().step());
  };
  absl::Status s = Run(config);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_NE(s.message().find("failed on " + Id("trainer") + ": NaN loss at step 2"),
            std::string::npos)
      << s;
  ASSERT_EQ(ctx_->records.size(), 2u) << "the start and iteration 1 only";
  EXPECT_TRUE(actors_->Received(Task::kLoadWeights).size() == 1u) << "nothing loads after";
}

TEST_P(LmLoopTest, FailedGenerationNamesTheRollout) {
  const JobConfig config = Config();
  overrides_[{"rollout", Task::kLmGenerate}] = [](const FakeWork&) {
    return FakeReply::Fail("no free KV blocks for a 9-token prompt");
  };
  absl::Status s = Run(config);
  EXPECT_NE(
      s.message().find("failed on " + Id("rollout") + ": no free KV blocks for a 9-token prompt"),
      std::string::npos)
      << s;
  EXPECT_TRUE(ctx_->records.empty());
}

// The reward worker is declared dead at the deadline; its slot (external here) waits for a
// rejoin, and with none the job stops naming it and why it was lost.
TEST_P(LmLoopTest, ScoreThatNeverComesHitsTheRequestDeadline) {
  const JobConfig config = Config();
  int calls = 0;
  overrides_[{"reward", Task::kScore}] = [&calls](const FakeWork& w) {
    if (++calls == 2) return FakeReply::Never();  // the first chunk of iteration 1
    return ScoreScript([](const reward::Sample&) { return reward::SampleScore::Ok(0); })(w);
  };
  absl::Status s = Run(config);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("for a live reward actor"), std::string::npos) << s;
  EXPECT_NE(s.message().find(Id("reward") + ": pending"), std::string::npos) << s;
  EXPECT_NE(s.message().find("within 30 s (controller.request_timeout_s)"), std::string::npos) << s;
  EXPECT_EQ(ctx_->records.size(), 1u);
  EXPECT_TRUE(actors_->Received(Task::kGrpoTrain).empty()) << "no training on a partial batch";
}

TEST_P(LmLoopTest, UnscorableSampleIsAnErrorNamingThePrompt) {
  const JobConfig config = Config();
  overrides_[{"reward", Task::kScore}] = ScoreScript([](const reward::Sample& s) {
    if (s.response != s.answer) return reward::SampleScore::Error("verifier timed out");
    return reward::SampleScore::Ok(1);
  });
  absl::Status s = Run(config);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_NE(s.message().find("could not score sample"), std::string::npos) << s;
  EXPECT_NE(s.message().find("exact: verifier timed out"), std::string::npos) << s;
  EXPECT_NE(s.message().find(Id("reward")), std::string::npos) << s;
}

TEST_P(LmLoopTest, RepeatedRequestIdFromTheRolloutIsAnError) {
  const JobConfig config = Config();
  overrides_[{"rollout", Task::kLmGenerate}] = [this](const FakeWork& w) {
    // Call 1 is the start evaluation; call 3, iteration 1's second chunk, repeats request 0.
    if (rollout_->calls() == 2) {
      rollout_->set_chunk_filter([](std::vector<LmGroup>& chunk) { chunk[0].request_id = 0; });
    } else {
      rollout_->set_chunk_filter(nullptr);
    }
    return rollout_->Generate()(w);
  };
  absl::Status s = Run(config);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_NE(s.message().find(Id("rollout") + " returned unknown or repeated request 0"),
            std::string::npos)
      << s;
  EXPECT_TRUE(actors_->Received(Task::kGrpoTrain).empty());
}

TEST_P(LmLoopTest, UnknownRequestIdFromTheRolloutIsAnError) {
  const JobConfig config = Config();
  overrides_[{"rollout", Task::kLmGenerate}] = [this](const FakeWork& w) {
    rollout_->set_chunk_filter([](std::vector<LmGroup>& chunk) { chunk[0].request_id = 99; });
    return rollout_->Generate()(w);
  };
  absl::Status s = Run(config);
  EXPECT_NE(s.message().find(Id("rollout") + " returned unknown or repeated request 99"),
            std::string::npos)
      << s;
  EXPECT_TRUE(ctx_->records.empty());
}

TEST_P(LmLoopTest, EveryTrainerRankTrainsOnTheBatchAndRankZeroPublishes) {
  // Rank 1 publishes other versions and losses: neither may reach the rollout or the record.
  overrides_[{"trainer", Task::kGrpoTrain}] = [](const FakeWork& w) {
    const int64_t step = w.request.grpo_train().step();
    FakeReply r = WeightsReply(w.rank == 0 ? step : 100 + step, "inline");
    (*r.result.mutable_metrics())["loss"] = w.rank == 0 ? 0.25 : 99.0;
    return r;
  };
  ASSERT_TRUE(Run(Config("trainer: {ranks: 2}\n")).ok());
  const std::vector<std::string> ids = actors_->Ids("trainer");
  ASSERT_EQ(ids.size(), 2u);
  auto trains = actors_->Received(Task::kGrpoTrain);
  ASSERT_EQ(trains.size(), 3u * 2);
  for (size_t i = 0; i < trains.size(); i += 2) {
    EXPECT_EQ(trains[i]->actor_id, ids[0]);
    EXPECT_EQ(trains[i + 1]->actor_id, ids[1]);
    EXPECT_TRUE(SameWork(*trains[i], *trains[i + 1]));
    EXPECT_EQ(CheckTrainBatch(*trains[i + 1], 2).samples, 8) << "rank 1 gets the whole batch";
  }
  auto loads = actors_->Received(Task::kLoadWeights);
  ASSERT_EQ(loads.size(), 3u);
  for (size_t i = 0; i < loads.size(); ++i) {
    EXPECT_EQ(loads[i]->request.load_weights().weights().version(), static_cast<int64_t>(i) + 1);
    const TensorFrame* bytes = loads[i]->Tensor("weights");
    ASSERT_NE(bytes, nullptr);
    EXPECT_EQ(bytes->ToVector<float>()[0], static_cast<float>(i + 1)) << "rank 0's bytes";
    EXPECT_EQ(ctx_->records[i + 1].metrics.at("loss"), 0.25);
  }
}

INSTANTIATE_TEST_SUITE_P(GrpoAndLmPpo, LmLoopTest,
                         ::testing::Values("grpo", "drgrpo", "rloo", "lm_ppo"));

// Issue 42: docs/rewards.md promised reward/total/mean and /std; metrics.jsonl had only each
// reward's. Two rewards, the totals their weighted sum (2 a + 0.5 b), by hand.
TEST(RewardStatsTest, RewardTotalMeanAndStdWereMissingFromMetrics) {
  const std::map<std::string, std::vector<double>> by_reward = {{"a", {1, 0, 1, 0}},
                                                                {"b", {-1, -1, 0, 0}}};
  Scored s;
  AddRewardSums(by_reward, {1.5, -0.5, 2, 0}, s.metrics);
  std::map<std::string, double> m;
  RewardStats(s, 4, m, "");
  EXPECT_EQ(m.at("reward/a/mean"), 0.5);
  EXPECT_EQ(m.at("reward/b/mean"), -0.5);
  EXPECT_EQ(m.at("reward/total/mean"), 0.75);
  // (1.5^2 + 0.5^2 + 2^2 + 0) / 4 - 0.75^2 = 1.0625, every term exact in binary.
  EXPECT_EQ(m.at("reward/total/std"), std::sqrt(1.0625));
  EXPECT_EQ(m.size(), 6u);
}

}  // namespace
}  // namespace rlforge::testing

namespace rlforge {
namespace {

// data.prompt_template: model end to end on the controller's side: LoadTaskText reads the
// checkpoint's chat template, and TaskText::Encode gives the ids transformers'
// apply_chat_template(tokenize=True) gives (checkpoint/expected.json); Response() undoes the
// assistant turn's markup.
TEST(TaskTextTest, ModelPromptTemplateEncodesLikeTransformers) {
  const std::string dir =
      std::string(RLFORGE_SOURCE_DIR_DEFAULT) + "/tests/data/chat_templates/checkpoint";
  LoadedJob job = LoadJobText(absl::StrCat("job: {algorithm: grpo}\nmodel: {path: '", dir,
                                           "'}\ndata: {prompt_template: model}\n"),
                              "t.yaml");
  ASSERT_TRUE(job.errors.empty()) << config::FormatErrors(job.errors);
  auto text = LoadTaskText(job.config, 4);
  ASSERT_TRUE(text.ok()) << text.status();
  std::ifstream in(dir + "/expected.json");
  for (const auto& c : nlohmann::json::parse(in)["cases"]) {
    EXPECT_EQ(text->Encode(c["system"], c["user"]), c["prompt_ids"].get<std::vector<int32_t>>());
  }
  LmSample s;
  s.tokens = text->EncodeResponse("42");
  EXPECT_EQ(text->Response(s), "42");
}

}  // namespace
}  // namespace rlforge

namespace rlforge::testing {
namespace {

// What `rlforge eval --job` scores: the held-out evaluation each loop runs, for every family
// with one; the arithmetic task's set for job.seed (issue 42: eval --job refused a job
// without data.heldout_path).
TEST(HeldoutEvaluationTest, EachLanguageModelJobsSettingsAndItsArithmeticHeldOutSet) {
  const std::string data = "data: {source: arithmetic, max_digits: 2, ops: ['+']}\n";
  JobConfig grpo = TestConfig("job: {algorithm: grpo, seed: 4}\n" + data +
                              "grpo: {eval_examples: 30, max_new_tokens: 5, "
                              "eval_verifier: numeric}\n");
  auto e = HeldoutEvaluationOf(grpo);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->examples, 30);
  EXPECT_EQ(e->max_new_tokens, 5);
  EXPECT_EQ(e->verifier, AnswerCheck::kNumeric);
  auto set = JobHeldoutSet(grpo, *e, e->examples);
  ASSERT_TRUE(set.ok()) << set.status();
  auto task = ArithmeticTaskFor(grpo.data);
  ASSERT_TRUE(task.ok());
  const std::vector<PromptExample> want = task->Examples(4, Split::kHeldout, 0, 30);
  ASSERT_EQ(set->size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ((*set)[i].prompt, want[i].prompt);
    EXPECT_EQ((*set)[i].answer, want[i].answer);
  }

  JobConfig dpo =
      TestConfig("job: {algorithm: dpo}\n" + data + "dpo: {eval_examples: 7, max_new_tokens: 3}\n");
  e = HeldoutEvaluationOf(dpo);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->examples, 7);
  EXPECT_EQ(e->max_new_tokens, 3);
  EXPECT_EQ(e->verifier, AnswerCheck::kExact);

  // SFT judges against the response it trains on: "The answer is 357." in the question style.
  JobConfig sft = TestConfig(
      "job: {algorithm: sft}\n"
      "data: {source: arithmetic, max_digits: 2, ops: ['+'], style: question, "
      "heldout_examples: 9}\n"
      "sft: {max_new_tokens: 12}\n");
  e = HeldoutEvaluationOf(sft);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->examples, 9);
  EXPECT_EQ(e->max_new_tokens, 12);
  set = JobHeldoutSet(sft, *e, e->examples);
  ASSERT_TRUE(set.ok()) << set.status();
  ASSERT_EQ(set->size(), 9u);
  EXPECT_EQ((*set)[0].answer, (*set)[0].response);
  EXPECT_EQ((*set)[0].answer.rfind("The answer is ", 0), 0u) << (*set)[0].answer;

  auto echo = HeldoutEvaluationOf(TestConfig("job: {algorithm: echo}\n"));
  ASSERT_FALSE(echo.ok());
  EXPECT_NE(std::string(echo.status().message()).find("job.algorithm echo has no held-out"),
            std::string::npos)
      << echo.status();
}

}  // namespace
}  // namespace rlforge::testing
