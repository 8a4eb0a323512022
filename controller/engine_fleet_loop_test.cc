// The LM loops over an engine fleet (rollout.workers: M) against scripted fakes: the same
// batch, seeds and held-out accuracy whatever M; whole groups dealt by tokens; an engine that
// lags the current version sits out; a failing engine is named; a lost engine's or reward
// worker's work is dealt again and the run matches an unfaulted one. No process, socket or
// sleep.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "controller/algorithm.h"
#include "controller/fake_actors.h"
#include "controller/fake_lm_actors.h"

namespace rlforge::testing {
namespace {

using Task = proto::WorkRequest::TaskCase;

bool Easy(const std::string& answer) { return std::stoi(answer) < 10; }

struct Job {
  JobConfig config;
  std::unique_ptr<FakeActors> actors;
  std::unique_ptr<FakeLmRollout> rollout;
  std::unique_ptr<FakeJobContext> ctx;
  absl::Status status;
  size_t fault_at = 0;  // requests received up to and including an injected fault

  std::string Engine(size_t i) const { return actors->Ids("rollout").at(i); }
  // (LmGenerate seed, request id, prompt, group seed) of every group queued, sorted.
  std::vector<std::tuple<uint64_t, int64_t, std::string, uint64_t>> Queued() const {
    std::vector<std::tuple<uint64_t, int64_t, std::string, uint64_t>> q;
    for (const auto& g : rollout->queued()) {
      q.emplace_back(g.request_seed, g.request_id, g.prompt, g.group_seed);
    }
    std::sort(q.begin(), q.end());
    return q;
  }
};

// A record's metrics without those that depend on the deal: the per-engine ones
// (rollout/<i>/...) and the engines' preemption count (here one per chunk streamed).
// The failure counts (faults/...) aside too.
std::map<std::string, double> FleetFree(const std::map<std::string, double>& m) {
  std::map<std::string, double> out;
  for (const auto& [k, v] : m) {
    if (!absl::StartsWith(k, "rollout/") && !absl::StartsWith(k, "faults/") &&
        k != "engine_preemptions") {
      out[k] = v;
    }
  }
  return out;
}

class EngineFleetLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = FreshTestDir();
    WriteTokenizerCheckpoint(root_ + "/model");
    auto tok = models::LoadTokenizer(root_ + "/model");
    ASSERT_TRUE(tok.ok()) << tok.status();
    tok_ = std::move(*tok);
  }

  // grpo: 6 prompts x 2 samples per iteration, streamed 2 groups at a time, 3 iterations;
  // 5 held-out prompts at the start and after every iteration. dpo: 3 pairs per iteration,
  // 4 iterations, the same held-out prompts every 2 iterations.
  JobConfig Config(const std::string& algorithm, int workers) {
    return TestConfig(absl::StrCat(
        "job: {algorithm: ", algorithm, ", seed: 1, iterations: ", algorithm == "dpo" ? 4 : 3,
        "}\n", "model: {path: ", root_, "/model}\n",
        "data: {source: arithmetic, min_digits: 1, max_digits: 2, ops: ['+']}\n",
        "controller: {request_timeout_s: 30}\n", "rollout: {workers: ", workers, rollout_extra_,
        "}\n", "reward: {workers: ", reward_workers_, reward_extra_, "}\n",
        algorithm == "dpo"
            ? "dpo: {pairs_per_iteration: 3, eval_every: 2, eval_examples: 5, max_new_tokens: 6}\n"
            : "grpo: {prompts_per_iteration: 6, group_size: 2, max_new_tokens: 6, eval_every: 1, "
              "eval_examples: 5, stream_groups: 2}\n"));
  }

  // Sampled: sample j is right when bit j of its group's seed is set or the answer is easy,
  // so a group sampled under another seed answers otherwise. Greedy (evaluation): right when
  // the answer is easy, or always from version 2 on.
  static std::string Respond(const FakeLmRollout& r, const std::string& prompt,
                             const proto::LmGenerate& p, int64_t j) {
    const std::string answer = PlainAnswer(prompt);
    const bool right = p.temperature() > 0 ? ((r.group_seed() >> j) & 1) != 0 || Easy(answer)
                                           : Easy(answer) || r.version() >= 2;
    return right ? answer : answer + "1";
  }

  // Runs `algorithm` on `workers` engines. `script` may replace scripts (before Start);
  // `started` may script the fakes by actor id (after Start, before the loop runs).
  std::unique_ptr<Job> Run(const std::string& algorithm, int workers,
                           const std::function<void(Job&)>& script = nullptr,
                           const std::function<void(Job&)>& started = nullptr) {
    auto job = std::make_unique<Job>();
    job->config = Config(algorithm, workers);
    auto algo = CreateAlgorithm(job->config);
    EXPECT_TRUE(algo.ok()) << algo.status();
    if (!algo.ok()) {
      job->status = algo.status();
      return job;
    }
    job->actors = std::make_unique<FakeActors>(job->config);
    job->actors->AddRoles((*algo)->Roles());
    Job* j = job.get();
    job->rollout = std::make_unique<FakeLmRollout>(
        *tok_, tmpl_, [j](const std::string& prompt, const proto::LmGenerate& p, int64_t s) {
          return Respond(*j->rollout, prompt, p, s);
        });
    job->actors->On("rollout", Task::kLmGenerate, job->rollout->Generate());
    job->actors->On("rollout", Task::kLoadWeights, job->rollout->LoadWeights());
    job->actors->On("reward", Task::kScore, ScoreScript([](const reward::Sample& s) {
                      return reward::SampleScore::Ok(s.response == s.answer ? 1.0 : 0.0);
                    }));
    job->actors->On("trainer", Task::kPublishWeights, PublishReply);
    job->actors->On("trainer", Task::kGrpoTrain, [](const FakeWork& w) {
      return WeightsReply(w.request.grpo_train().step(), "inline");
    });
    job->actors->On("trainer", Task::kLmSave, [](const FakeWork&) { return FakeReply::Ok(); });
    job->actors->On("trainer", Task::kDpoTrain,
                    [](const FakeWork& w) { return WeightsReply(w.request.dpo_train().step()); });
    if (script) script(*job);
    job->status = job->actors->Start();
    if (!job->status.ok()) return job;
    if (started) started(*job);
    const std::string dir = absl::StrCat(root_, "/run", runs_++);
    std::filesystem::create_directories(dir);
    job->ctx = std::make_unique<FakeJobContext>(*job->actors, job->config, dir);
    job->status = (*algo)->Run(*job->ctx);
    return job;
  }

  // Every train request and record of `fleet` equals `one`'s (per-engine metrics aside), and
  // every group was queued with the same request id, prompt and seed (`requeued`: some of
  // `fleet`'s were queued again after their engine was lost).
  void ExpectSameRun(const Job& one, const Job& fleet, bool requeued = false) {
    for (Task t : {Task::kGrpoTrain, Task::kDpoTrain}) {
      auto a = one.actors->Received(t), b = fleet.actors->Received(t);
      ASSERT_EQ(a.size(), b.size());
      for (size_t k = 0; k < a.size(); ++k) EXPECT_TRUE(SameWork(*a[k], *b[k])) << "train " << k;
    }
    ASSERT_EQ(one.ctx->records.size(), fleet.ctx->records.size());
    for (size_t k = 0; k < one.ctx->records.size(); ++k) {
      EXPECT_EQ(FleetFree(one.ctx->records[k].metrics), FleetFree(fleet.ctx->records[k].metrics))
          << "record " << k;
    }
    auto expected = one.Queued(), queued = fleet.Queued();
    if (requeued) {
      expected.erase(std::unique(expected.begin(), expected.end()), expected.end());
      queued.erase(std::unique(queued.begin(), queued.end()), queued.end());
    }
    EXPECT_EQ(expected, queued);
  }

  // Runs grpo on `workers` engines with the `victim`'s (a role) `call`-th request answered by
  // `fault` (Crash or Hang); a crashed engine's queue goes with it. Dead actors rejoin when
  // `rejoin`.
  std::unique_ptr<Job> RunFaulted(int workers, const std::string& victim, int rank, int call,
                                  FakeReply (*fault)(), bool rejoin) {
    auto calls = std::make_shared<int>(0);
    auto inject = [=](Job& j, Task task, FakeScript inner) {
      j.actors->On(victim, task, [=, &j](const FakeWork& w) {
        if (w.rank == rank && ++*calls == call) {
          j.fault_at = j.actors->received().size();
          if (victim == "rollout") j.rollout->Forget(w.actor_id);
          return fault();
        }
        return inner(w);
      });
    };
    return Run("grpo", workers, [&](Job& j) {
      j.actors->set_rejoin(rejoin);
      if (victim == "rollout") {
        inject(j, Task::kLmGenerate, j.rollout->Generate());
      } else {
        inject(j, Task::kScore, ScoreScript([](const reward::Sample& s) {
                 return reward::SampleScore::Ok(s.response == s.answer ? 1.0 : 0.0);
               }));
      }
    });
  }

  std::string root_;
  int runs_ = 0;
  int reward_workers_ = 1;
  std::string rollout_extra_, reward_extra_;  // more keys of the rollout and reward sections
  std::unique_ptr<models::Tokenizer> tok_;
  models::PromptTemplate tmpl_ = *models::PromptTemplate::Create("none");
};

TEST_F(EngineFleetLoopTest, TwoAndThreeEnginesGiveTheSameBatchesSeedsAndAccuracyAsOne) {
  auto one = Run("grpo", 1);
  ASSERT_TRUE(one->status.ok()) << one->status;
  ASSERT_EQ(one->actors->Received(Task::kGrpoTrain).size(), 3u);
  // The seeds matter: the fake's samples follow them, and the iterations' rewards differ.
  for (int workers : {2, 3}) {
    SCOPED_TRACE(absl::StrCat(workers, " engines"));
    auto fleet = Run("grpo", workers);
    ASSERT_TRUE(fleet->status.ok()) << fleet->status;
    ExpectSameRun(*one, *fleet);
    // Every engine generated in every iteration and evaluation.
    for (size_t i = 0; i < static_cast<size_t>(workers); ++i) {
      int64_t gens = 0;
      for (const FakeWork* w : fleet->actors->Received(Task::kLmGenerate)) {
        gens += w->actor_id == fleet->Engine(i);
      }
      EXPECT_GE(gens, 7) << fleet->Engine(i) << ": 3 iterations and 4 evaluations";
    }
  }
}

TEST_F(EngineFleetLoopTest, GroupsAreDealtWholeByTokensAndEachEngineIsTimed) {
  auto one = Run("grpo", 1);
  auto fleet = Run("grpo", 3);
  ASSERT_TRUE(one->status.ok()) << one->status;
  ASSERT_TRUE(fleet->status.ok()) << fleet->status;
  // Each request carrying prompts carries an engine's whole share: 2 of an iteration's 6
  // groups (their costs differ by a prompt token or two, far less than a group's 12 sampled
  // tokens), 1 or 2 of the 5 held-out prompts.
  int64_t dealt = 0;
  for (const FakeWork* w : fleet->actors->Received(Task::kLmGenerate)) {
    auto groups = GroupsFromFrames(w->tensors, false, 0);
    ASSERT_TRUE(groups.ok());
    if (groups->empty()) continue;
    const bool sampled = w->request.lm_generate().temperature() > 0;
    EXPECT_GE(groups->size(), sampled ? 2u : 1u);
    EXPECT_LE(groups->size(), 2u);
    dealt += static_cast<int64_t>(groups->size());
  }
  EXPECT_EQ(dealt, 3 * 6 + 4 * 5) << "each group dealt once";
  for (int64_t step = 1; step <= 3; ++step) {
    const IterationRecord& r = fleet->ctx->records[step];
    for (int i = 0; i < 3; ++i) {
      const std::string p = absl::StrCat("rollout/", i, "/");
      EXPECT_EQ(r.metrics.at(p + "groups"), 2);
      EXPECT_EQ(r.metrics.at(p + "version"), static_cast<double>(step - 1));
      EXPECT_EQ(r.timings.at(p + "generate_s"), 0.25) << "one chunk of 2 groups";
      EXPECT_FALSE(r.metrics.contains(p + "generate_s"));
    }
    // The fleet's generation time is its busiest engine's; one engine streams 3 chunks.
    EXPECT_EQ(r.timings.at("generate_s"), 0.25);
    EXPECT_EQ(one->ctx->records[step].timings.at("generate_s"), 0.75);
    EXPECT_EQ(one->ctx->records[step].metrics.at("rollout/0/groups"), 6);
  }
}

TEST_F(EngineFleetLoopTest, EngineLaggingAVersionIsNeverGivenANewerIterationsPrompts) {
  auto one = Run("grpo", 1);
  ASSERT_TRUE(one->status.ok()) << one->status;
  // rollout-1 loads versions 1 but not 2 or 3: it acks version 1 from then on.
  auto fleet = Run("grpo", 2, nullptr, [](Job& j) { j.rollout->Freeze(j.Engine(1), 1); });
  ASSERT_TRUE(fleet->status.ok()) << fleet->status;
  ExpectSameRun(*one, *fleet);
  const std::string lagging = fleet->Engine(1);
  bool behind = false;
  int64_t gens_before = 0;
  for (const FakeWork& w : fleet->actors->received()) {
    if (w.actor_id != lagging) continue;
    if (w.request.has_load_weights() && w.request.load_weights().weights().version() >= 2) {
      behind = true;
    }
    if (w.request.has_lm_generate()) {
      EXPECT_FALSE(behind) << lagging << " was given prompts while it served version 1";
      ++gens_before;
    }
  }
  EXPECT_TRUE(behind);
  EXPECT_GT(gens_before, 0) << "it took part while it was current";
  EXPECT_EQ(fleet->rollout->version(lagging), 1);
  // Iteration 3 (version 2): rollout-0 generates the whole batch.
  const IterationRecord& r = fleet->ctx->records[3];
  EXPECT_EQ(r.metrics.at("rollout/0/groups"), 6);
  EXPECT_EQ(r.metrics.at("rollout/0/version"), 2);
  EXPECT_EQ(r.metrics.at("rollout/1/groups"), 0);
  EXPECT_EQ(r.metrics.at("rollout/1/version"), 1);
  EXPECT_EQ(r.timings.at("rollout/1/generate_s"), 0);
}

TEST_F(EngineFleetLoopTest, ReplyMadeWithAnOldVersionIsAnErrorNamingTheEngine) {
  // rollout-1 acks every load but keeps generating with version 1.
  auto fleet = Run("grpo", 2, [](Job& j) {
    FakeLmRollout* r = j.rollout.get();
    j.actors->On("rollout", Task::kLmGenerate, [r, &j](const FakeWork& w) {
      FakeReply reply = r->Generate()(w);
      if (w.actor_id == j.Engine(1) && r->version(w.actor_id) >= 2) {
        reply.result.set_policy_version(1);
      }
      return reply;
    });
  });
  EXPECT_EQ(fleet->status.code(), absl::StatusCode::kInternal) << fleet->status;
  EXPECT_NE(fleet->status.message().find(fleet->Engine(1) +
                                         " generated with policy version 1 where version 2 "
                                         "is required"),
            std::string::npos)
      << fleet->status;
  EXPECT_EQ(fleet->actors->Received(Task::kGrpoTrain).size(), 2u) << "no training after";
}

TEST_F(EngineFleetLoopTest, NoEngineAtTheCurrentVersionIsAnErrorNamingEach) {
  auto fleet = Run("grpo", 2, nullptr, [](Job& j) {
    j.rollout->Freeze(j.Engine(0), 1);
    j.rollout->Freeze(j.Engine(1), 1);
  });
  EXPECT_EQ(fleet->status.code(), absl::StatusCode::kFailedPrecondition) << fleet->status;
  EXPECT_NE(fleet->status.message().find(absl::StrCat("no rollout engine serves policy version 2 (",
                                                      fleet->Engine(0), " serves 1, ",
                                                      fleet->Engine(1), " serves 1)")),
            std::string::npos)
      << fleet->status;
}

TEST_F(EngineFleetLoopTest, FailedEngineIsNamed) {
  auto fleet = Run("grpo", 3, [](Job& j) {
    FakeLmRollout* r = j.rollout.get();
    j.actors->On("rollout", Task::kLmGenerate, [r, &j](const FakeWork& w) {
      if (w.actor_id == j.Engine(2))
        return FakeReply::Fail("no free KV blocks for a 9-token prompt");
      return r->Generate()(w);
    });
  });
  EXPECT_EQ(fleet->status.code(), absl::StatusCode::kAborted) << fleet->status;
  EXPECT_NE(fleet->status.message().find("failed on " + fleet->Engine(2) +
                                         ": no free KV blocks for a 9-token prompt"),
            std::string::npos)
      << fleet->status;
  EXPECT_TRUE(fleet->ctx == nullptr || fleet->ctx->records.empty());
}

TEST_F(EngineFleetLoopTest, EveryEngineLoadsEveryVersion) {
  auto fleet = Run("grpo", 3);
  ASSERT_TRUE(fleet->status.ok()) << fleet->status;
  std::map<std::string, std::vector<int64_t>> loaded;
  for (const FakeWork* w : fleet->actors->Received(Task::kLoadWeights)) {
    loaded[w->actor_id].push_back(w->request.load_weights().weights().version());
    const TensorFrame* bytes = w->Tensor("weights");
    ASSERT_NE(bytes, nullptr) << w->actor_id << ": each engine gets the inline bytes";
    EXPECT_EQ(bytes->ToVector<float>()[0],
              static_cast<float>(w->request.load_weights().weights().version()));
  }
  ASSERT_EQ(loaded.size(), 3u);
  for (const auto& [id, versions] : loaded) {
    EXPECT_EQ(versions, (std::vector<int64_t>{1, 2, 3})) << id;
  }
}

TEST_F(EngineFleetLoopTest, DpoEvaluatesAcrossTheFleetAsOnOneEngine) {
  auto one = Run("dpo", 1);
  auto fleet = Run("dpo", 3);
  ASSERT_TRUE(one->status.ok()) << one->status;
  ASSERT_TRUE(fleet->status.ok()) << fleet->status;
  ExpectSameRun(*one, *fleet);
  const auto& r = fleet->ctx->records;
  ASSERT_EQ(r.size(), 5u);
  EXPECT_LT(r[0].metrics.at("heldout_accuracy"), 1.0) << "the test needs hard prompts";
  EXPECT_EQ(r[4].metrics.at("heldout_accuracy"), 1.0);
}

// The kinds of the requests `actor` (any instance) received after the injected fault.
std::vector<std::string> KindsAfterFault(const Job& j, const std::string& actor) {
  std::vector<std::string> kinds;
  for (size_t k = j.fault_at; k < j.actors->received().size(); ++k) {
    const FakeWork& w = j.actors->received()[k];
    if (w.actor_id == actor) kinds.push_back(w.kind());
  }
  return kinds;
}

TEST_F(EngineFleetLoopTest, LostEngineHasItsGroupsDealtAgainAndTheRunMatchesAnUnfaultedOne) {
  auto clean = Run("grpo", 2);
  ASSERT_TRUE(clean->status.ok()) << clean->status;
  // rollout-1 dies on its 8th generation request (iteration 2, policy version 1), taking the
  // groups queued on it; a replacement joins.
  auto faulted = RunFaulted(2, "rollout", 1, 8, &FakeReply::Crash, /*rejoin=*/true);
  ASSERT_TRUE(faulted->status.ok()) << faulted->status;
  ExpectSameRun(*clean, *faulted,
                /*requeued=*/true);  // the same train batches, rewards and metrics
  const Controller& c = faulted->actors->controller();
  EXPECT_EQ(c.faults().actors_lost, 1u);
  EXPECT_EQ(c.faults().works_given_back, 1u);
  EXPECT_EQ(faulted->actors->rejoins(), 1);
  const IterationRecord& last = faulted->ctx->records.back();
  EXPECT_GT(last.metrics.at("faults/requeued_groups"), 0) << "the groups it owed, dealt again";
  EXPECT_EQ(last.metrics.at("faults/requeued_scores"), 0);
  // The replacement loaded the current weights before its first prompts.
  const std::vector<std::string> after = KindsAfterFault(*faulted, faulted->Engine(1));
  ASSERT_FALSE(after.empty());
  EXPECT_EQ(after.front(), "load_weights");
}

// weights.transport gloo: a group's members are fixed when it forms, so the loop names a new
// group whenever the engines loading change, and gives each its rank and the group's size.
TEST_F(EngineFleetLoopTest, AReplacedEngineOnTheGlooPathLoadsInANewlyNamedGroup) {
  auto calls = std::make_shared<int>(0);
  auto job = Run("grpo", 2, [&](Job& j) {
    j.actors->set_rejoin(true);
    j.actors->On("trainer", Task::kGrpoTrain, [](const FakeWork& w) {
      return WeightsReply(w.request.grpo_train().step(), "gloo:weights");
    });
    auto generate = j.rollout->Generate();
    j.actors->On("rollout", Task::kLmGenerate, [calls, generate, &j](const FakeWork& w) {
      if (w.rank == 1 && ++*calls == 8) {  // iteration 2: rollout-1 dies, a replacement joins
        j.rollout->Forget(w.actor_id);
        return FakeReply::Crash();
      }
      return generate(w);
    });
  });
  ASSERT_TRUE(job->status.ok()) << job->status;
  EXPECT_EQ(job->actors->rejoins(), 1);
  std::map<std::string, std::map<std::string, int>> ranks;  // group -> actor -> rank
  std::map<std::string, int> sizes;
  std::vector<std::string> order;
  for (const FakeWork* w : job->actors->Received(Task::kLoadWeights)) {
    const proto::LoadWeights& l = w->request.load_weights();
    const std::string group = l.weights().location();
    ASSERT_TRUE(absl::StartsWith(group, "gloo:weights-")) << group;
    if (order.empty() || order.back() != group) order.push_back(group);
    auto [it, fresh] = ranks[group].emplace(w->actor_id, l.group_rank());
    EXPECT_EQ(it->second, l.group_rank()) << w->actor_id << " changed rank in " << group;
    EXPECT_EQ(sizes.emplace(group, l.group_size()).first->second, l.group_size()) << group;
  }
  for (const auto& [group, members] : ranks) {
    ASSERT_EQ(static_cast<int>(members.size()) + 1, sizes[group]) << group;
    std::set<int> got, want;  // ranks 1..members: trainer rank 0 is rank 0
    for (const auto& [actor, rank] : members) got.insert(rank);
    for (int r = 1; r <= static_cast<int>(members.size()); ++r) want.insert(r);
    EXPECT_EQ(got, want) << group;
  }
  // Both engines; then groups named anew once the members changed: the replacement (a new
  // member under the lost engine's id) loads in a later group than the first (alone, when it
  // registered while the others served, or with the survivor at the next version's sync).
  std::string seen;
  for (const std::string& g : order) absl::StrAppend(&seen, g, ":", sizes[g], " ");
  ASSERT_GE(order.size(), 2u) << seen;
  EXPECT_EQ(sizes[order.front()], 3) << seen;
  bool replacement_loaded = false;
  for (size_t k = 1; k < order.size(); ++k) {
    replacement_loaded = replacement_loaded || ranks[order[k]].count(job->Engine(1)) > 0;
  }
  EXPECT_TRUE(replacement_loaded) << seen;
  for (const FakeWork* w : job->actors->Received(Task::kPublishWeights)) {
    EXPECT_TRUE(ranks.count("gloo:" + w->request.publish_weights().group()))
        << w->request.publish_weights().group();
  }
}

TEST_F(EngineFleetLoopTest, HungEngineMeetsTheRequestDeadlineAndItsGroupsMoveOn) {
  auto clean = Run("grpo", 2);
  auto faulted = RunFaulted(2, "rollout", 0, 3, &FakeReply::Hang, /*rejoin=*/false);
  ASSERT_TRUE(clean->status.ok()) << clean->status;
  ASSERT_TRUE(faulted->status.ok()) << faulted->status;
  ExpectSameRun(*clean, *faulted, /*requeued=*/true);
  EXPECT_EQ(faulted->actors->controller().faults().actors_lost, 1u);
  // Without a replacement, rollout-1 generated everything after the loss.
  const IterationRecord& last = faulted->ctx->records.back();
  EXPECT_EQ(last.metrics.at("rollout/1/groups"), 6);
  EXPECT_EQ(last.metrics.at("rollout/0/groups"), 0);
}

TEST_F(EngineFleetLoopTest, LosingTheOnlyEngineWaitsForItsReplacement) {
  auto clean = Run("grpo", 1);
  auto faulted = RunFaulted(1, "rollout", 0, 5, &FakeReply::Crash, /*rejoin=*/true);
  ASSERT_TRUE(clean->status.ok()) << clean->status;
  ASSERT_TRUE(faulted->status.ok()) << faulted->status;
  ExpectSameRun(*clean, *faulted, /*requeued=*/true);
  EXPECT_EQ(faulted->actors->rejoins(), 1);
}

TEST_F(EngineFleetLoopTest, LosingTheOnlyEngineWithNoReplacementFailsNamingTheRole) {
  auto faulted = RunFaulted(1, "rollout", 0, 5, &FakeReply::Crash, /*rejoin=*/false);
  EXPECT_EQ(faulted->status.code(), absl::StatusCode::kDeadlineExceeded) << faulted->status;
  EXPECT_NE(faulted->status.message().find("for a live rollout actor"), std::string::npos)
      << faulted->status;
}

TEST_F(EngineFleetLoopTest, LostRewardWorkerHasItsScoringSentToAnother) {
  reward_workers_ = 2;
  auto clean = Run("grpo", 2);
  auto faulted = RunFaulted(2, "reward", 0, 4, &FakeReply::Crash, /*rejoin=*/false);
  ASSERT_TRUE(clean->status.ok()) << clean->status;
  ASSERT_TRUE(faulted->status.ok()) << faulted->status;
  ExpectSameRun(*clean, *faulted, /*requeued=*/true);
  EXPECT_EQ(faulted->actors->controller().faults().actors_lost, 1u);
  EXPECT_EQ(faulted->ctx->records.back().metrics.at("faults/requeued_scores"), 1);
  // reward-0 took no work after it died.
  EXPECT_EQ(KindsAfterFault(*faulted, faulted->actors->Ids("reward")[0]).size(), 0u);
}

// Elastic workers (docs/fault_tolerance.md): joins, leaves and minimum live counts.

// The requests `actor` received, by kind, in order.
std::vector<std::string> KindsOf(const Job& j, const std::string& actor) {
  std::vector<std::string> kinds;
  for (const FakeWork& w : j.actors->received()) {
    if (w.actor_id == actor) kinds.push_back(w.kind());
  }
  return kinds;
}

// Records `status` calls of the job's controller; `on_wait` runs when it starts waiting.
std::shared_ptr<std::vector<std::string>> WatchStatus(Job& j, std::function<void()> on_wait) {
  auto seen = std::make_shared<std::vector<std::string>>();
  j.actors->controller().set_status_sink(
      [seen, on_wait](const std::string& state, const std::string& message) {
        seen->push_back(state + ": " + message);
        if (state == "waiting") on_wait();
      });
  return seen;
}

TEST_F(EngineFleetLoopTest, AnEngineJoinedMidRunLoadsTheWeightsAndIsDealtGroupsInTheNextIteration) {
  auto clean = Run("grpo", 1);
  ASSERT_TRUE(clean->status.ok()) << clean->status;
  rollout_extra_ = ", max_workers: 2";
  auto joined = Run("grpo", 1, [](Job& j) {
    // While iteration 1 trains, a second engine joins by hand.
    j.actors->On("trainer", Task::kGrpoTrain, [&j](const FakeWork& w) {
      if (w.request.grpo_train().step() == 1) j.actors->Join("rollout");
      return WeightsReply(w.request.grpo_train().step(), "inline");
    });
  });
  ASSERT_TRUE(joined->status.ok()) << joined->status;
  ExpectSameRun(*clean, *joined);         // the same batches, seeds and metrics whatever the fleet
  const std::string extra = "rollout-1";  // the slot beyond rollout.workers
  // Iteration 1 ran on one engine; the joiner's first request is the current weights, then it
  // generates in iteration 2.
  const auto& records = joined->ctx->records;  // step 0 (the start's evaluation), 1, 2, 3
  ASSERT_EQ(records.size(), 4u);
  EXPECT_EQ(records[1].metrics.count("rollout/1/groups"), 0u);
  EXPECT_GT(records[2].metrics.at("rollout/1/groups"), 0);
  EXPECT_EQ(records[2].metrics.at("rollout/0/groups") + records[2].metrics.at("rollout/1/groups"),
            6);
  const std::vector<std::string> kinds = KindsOf(*joined, extra);
  ASSERT_FALSE(kinds.empty());
  EXPECT_EQ(kinds.front(), "load_weights");
  EXPECT_EQ(joined->rollout->version(extra), 3) << "it kept up with every version since";
  const Controller& c = joined->actors->controller();
  EXPECT_EQ(c.elastic().joins, 1u);
  EXPECT_EQ(c.faults().actors_lost, 0u);
  EXPECT_TRUE(c.actors().Find(extra)->elastic);
}

// On the shared-memory ring and the mapped segment (weights.apply mapped) a joiner loads the
// current version at once, as over zmq: the trainer is asked to publish it again, to the joiner
// alone, under a publication number of its own (the ring streams it again; the segment still
// holds it and writes nothing).
TEST_F(EngineFleetLoopTest, AnEngineJoinedOnTheShmRingLoadsTheCurrentVersionStreamedAgain) {
  rollout_extra_ = ", max_workers: 2";
  for (const std::string where : {"shm-ring:/fake", "shm-mapped:/fake"}) {
    SCOPED_TRACE(where);
    auto joined = Run("grpo", 1, [where](Job& j) {
      j.actors->On("trainer", Task::kGrpoTrain, [where](const FakeWork& w) {
        return WeightsReply(w.request.grpo_train().step(), where);
      });
      j.actors->On("trainer", Task::kPublishWeights, RingPublishReply());
      // It joins while version 1 streams to rollout-0: after that version was dealt out.
      auto load = j.rollout->LoadWeights();
      j.actors->On("rollout", Task::kLoadWeights, [load, &j](const FakeWork& w) {
        if (w.request.load_weights().weights().version() == 1) j.actors->Join("rollout");
        return load(w);
      });
    });
    ASSERT_TRUE(joined->status.ok()) << joined->status;
    ExpectEveryStreamReadByItsReaders(*joined->actors);
    EXPECT_EQ(joined->actors->Received(Task::kPublishWeights).size(), 4u)
        << "once per version, and version 1 again for the joiner";
    std::vector<std::tuple<std::string, int64_t, int64_t>> loads;  // engine, version, publication
    for (const FakeWork* w : joined->actors->Received(Task::kLoadWeights)) {
      const proto::LoadWeights& l = w->request.load_weights();
      loads.emplace_back(w->actor_id, l.weights().version(), l.publication());
    }
    EXPECT_EQ(loads, (std::vector<std::tuple<std::string, int64_t, int64_t>>{{"rollout-0", 1, 1},
                                                                             {"rollout-1", 1, 2},
                                                                             {"rollout-0", 2, 3},
                                                                             {"rollout-1", 2, 3},
                                                                             {"rollout-0", 3, 4},
                                                                             {"rollout-1", 3, 4}}));
    const auto& records = joined->ctx->records;
    ASSERT_EQ(records.size(), 4u);
    EXPECT_GT(records[2].metrics.at("rollout/1/groups"), 0) << "version 1: it took part";
    const std::vector<std::string> kinds = KindsOf(*joined, "rollout-1");
    ASSERT_FALSE(kinds.empty());
    EXPECT_EQ(kinds.front(), "load_weights");
  }
}

// Issue 42: with weights.transport shm (the default on one host) a job whose only engine was
// lost failed: the ring had carried the current version once, and no engine was left to
// generate for the next. The trainer now streams the current version again to the
// replacement, which generates the rest of the run; every batch is the unfaulted run's.
TEST_F(EngineFleetLoopTest,
       LosingTheOnlyEngineOnTheShmRingStreamsTheCurrentVersionToItsReplacement) {
  auto ring = [](Job& j) {
    j.actors->On("trainer", Task::kGrpoTrain, [](const FakeWork& w) {
      return WeightsReply(w.request.grpo_train().step(), "shm-ring:/fake");
    });
    j.actors->On("trainer", Task::kPublishWeights, RingPublishReply());
  };
  auto clean = Run("grpo", 1, ring);
  ASSERT_TRUE(clean->status.ok()) << clean->status;
  // The engine dies on its first generation request at policy version 1 (iteration 2), with
  // the groups queued on it; a replacement registers.
  auto faulted = Run("grpo", 1, [&](Job& j) {
    ring(j);
    j.actors->set_rejoin(true);
    auto generate = j.rollout->Generate();
    j.actors->On("rollout", Task::kLmGenerate, [generate, &j](const FakeWork& w) {
      if (j.fault_at == 0 && j.rollout->version(w.actor_id) == 1) {
        j.fault_at = j.actors->received().size();
        j.rollout->Forget(w.actor_id);
        return FakeReply::Crash();
      }
      return generate(w);
    });
  });
  ASSERT_TRUE(faulted->status.ok()) << faulted->status;
  EXPECT_EQ(faulted->actors->rejoins(), 1);
  EXPECT_EQ(faulted->actors->controller().faults().actors_lost, 1u);
  ExpectSameRun(*clean, *faulted, /*requeued=*/true);  // every group once, the same samples
  ExpectEveryStreamReadByItsReaders(*faulted->actors);
  // After the fault: version 1 published again for the replacement alone, which loads it before
  // its first prompts.
  std::vector<std::string> after;
  for (size_t k = faulted->fault_at; k < faulted->actors->received().size(); ++k) {
    const FakeWork& w = faulted->actors->received()[k];
    after.push_back(w.kind());
    if (w.request.has_publish_weights() && after.size() == 1) {
      EXPECT_EQ(w.request.publish_weights().readers(), 1);
    }
    if (w.request.has_load_weights() && after.size() == 2) {
      EXPECT_EQ(w.request.load_weights().weights().version(), 1);
    }
  }
  ASSERT_GE(after.size(), 3u);
  EXPECT_EQ(after[0], "publish_weights");
  EXPECT_EQ(after[1], "load_weights");
  EXPECT_EQ(after[2], "lm_generate");
  EXPECT_EQ(faulted->actors->Received(Task::kPublishWeights).size(),
            clean->actors->Received(Task::kPublishWeights).size() + 1);
}

TEST_F(EngineFleetLoopTest, AnEngineLeavingOnSigtermHandsBackItsGroupsAndNoFaultIsCounted) {
  auto clean = Run("grpo", 2);
  ASSERT_TRUE(clean->status.ok()) << clean->status;
  // rollout-1 answers its first chunk (2 of its 3 groups), then leaves holding the third.
  auto left = Run("grpo", 2, [](Job& j) {
    auto generate = j.rollout->Generate();
    j.actors->On("rollout", Task::kLmGenerate, [generate, &j](const FakeWork& w) {
      if (w.rank != 1 || j.fault_at > 0) return generate(w);
      FakeReply chunk = generate(w);
      j.rollout->Forget(w.actor_id);
      j.fault_at = j.actors->received().size();
      return FakeReply::AndLeave(std::move(chunk));
    });
  });
  ASSERT_TRUE(left->status.ok()) << left->status;
  // Every batch holds each prompt's group once, with the samples of the unfaulted run.
  ExpectSameRun(*clean, *left, /*requeued=*/true);
  const Controller& c = left->actors->controller();
  EXPECT_EQ(c.faults().actors_lost, 0u);
  EXPECT_EQ(c.faults().restarts, 0u);
  EXPECT_EQ(c.elastic().leaves, 1u);
  EXPECT_EQ(c.actors().Find(left->Engine(1))->state, ActorState::kLeft);
  EXPECT_TRUE(KindsAfterFault(*left, left->Engine(1)).empty()) << "nothing is sent after it left";
  for (const IterationRecord& r : left->ctx->records) {
    EXPECT_EQ(r.metrics.count("faults/requeued_groups"), 0u) << "step " << r.step;
  }
  // The first training round: rollout-0 generated what rollout-1 handed back.
  EXPECT_EQ(left->ctx->records[1].metrics.at("rollout/1/groups"), 0);
  EXPECT_EQ(left->ctx->records[1].metrics.at("rollout/0/groups"), 6);
}

TEST_F(EngineFleetLoopTest, TheOnlyRewardWorkerLeavingMakesTheJobWaitUntilAnotherJoins) {
  auto clean = Run("grpo", 1);
  ASSERT_TRUE(clean->status.ok()) << clean->status;
  auto calls = std::make_shared<int>(0);
  std::shared_ptr<std::vector<std::string>> seen;
  auto job = Run(
      "grpo", 1,
      [calls](Job& j) {
        auto score = ScoreScript([](const reward::Sample& s) {
          return reward::SampleScore::Ok(s.response == s.answer ? 1.0 : 0.0);
        });
        j.actors->On("reward", Task::kScore, [calls, score, &j](const FakeWork& w) {
          if (w.actor_id != "reward-0" || ++*calls != 4) return score(w);
          j.fault_at = j.actors->received().size();
          return FakeReply::AndLeave(score(w));
        });
      },
      [&seen](Job& j) { seen = WatchStatus(j, [&j] { j.actors->Join("reward"); }); });
  ASSERT_TRUE(job->status.ok()) << job->status;
  ExpectSameRun(*clean, *job, /*requeued=*/true);
  ASSERT_EQ(seen->size(), 2u);
  EXPECT_EQ((*seen)[0].rfind("waiting: waiting for a live reward actor", 0), 0u) << (*seen)[0];
  EXPECT_NE((*seen)[0].find("0 live of minimum 1"), std::string::npos) << (*seen)[0];
  EXPECT_EQ((*seen)[1], "running: ");
  const Controller& c = job->actors->controller();
  EXPECT_EQ(c.elastic().leaves, 1u);
  EXPECT_EQ(c.elastic().joins, 1u);
  EXPECT_EQ(c.faults().actors_lost, 0u);
  EXPECT_EQ(c.actors().Find("reward-0")->state, ActorState::kReady) << "the joiner took its slot";
}

TEST_F(EngineFleetLoopTest, BelowRolloutMinWorkersTheFirstRoundWaitsForAJoin) {
  auto clean = Run("grpo", 1);
  ASSERT_TRUE(clean->status.ok()) << clean->status;
  rollout_extra_ = ", max_workers: 2, min_workers: 2";
  std::shared_ptr<std::vector<std::string>> seen;
  auto job = Run("grpo", 1, nullptr,
                 [&seen](Job& j) { seen = WatchStatus(j, [&j] { j.actors->Join("rollout"); }); });
  ASSERT_TRUE(job->status.ok()) << job->status;
  ExpectSameRun(*clean, *job);
  ASSERT_EQ(seen->size(), 2u);
  EXPECT_EQ((*seen)[0].rfind("waiting: waiting for 2 live rollout actors (rollout.min_workers): 1 "
                             "live of minimum 2",
                             0),
            0u)
      << (*seen)[0];
  EXPECT_GT(job->ctx->records[1].metrics.at("rollout/1/groups"), 0);
}

TEST_F(EngineFleetLoopTest, BelowRolloutMinWorkersWithNoJoinFailsNamingRoleLiveAndMinimum) {
  rollout_extra_ = ", max_workers: 2, min_workers: 2";
  auto job = Run("grpo", 1);
  EXPECT_EQ(job->status.code(), absl::StatusCode::kDeadlineExceeded) << job->status;
  EXPECT_NE(job->status.message().find(
                "s for 2 live rollout actors (rollout.min_workers), have 1 (controller."),
            std::string::npos)
      << job->status;
}

}  // namespace
}  // namespace rlforge::testing
