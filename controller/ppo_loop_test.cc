// The PPO controller loop against scripted actors: two rollout fakes that return fixed
// trajectories (one with a termination and an autoreset step) and a trainer fake that
// publishes version = iteration. The batch's advantages are checked against values worked
// out by hand.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "controller/algorithm.h"
#include "controller/fake_actors.h"

namespace rlforge::testing {
namespace {

using Task = proto::WorkRequest::TaskCase;

constexpr int64_t kEnvs = 2, kSteps = 3, kObs = 2;

// Trajectories of worker `rank`, [T, N] each: obs 100 rank + 10 t + n (+ 0.5 for the second
// feature), reward 1, value 0, last values 0. Worker 1: env 0 terminates at t = 1, and env 1's
// step 0 is an autoreset step (not valid).
FakeReply Trajectories(int rank, int64_t version, int64_t iteration) {
  const int64_t TN = kSteps * kEnvs;
  std::vector<float> obs, logp, values(TN, 0), rewards(TN, 1), last(kEnvs, 0);
  std::vector<int64_t> actions;
  std::vector<uint8_t> term(TN, 0), trunc(TN, 0), valid(TN, 1);
  for (int64_t t = 0; t < kSteps; ++t) {
    for (int64_t n = 0; n < kEnvs; ++n) {
      const float base = static_cast<float>(100 * rank + 10 * t + n);
      obs.push_back(base);
      obs.push_back(base + 0.5f);
      actions.push_back((t + n + rank) % 2);
      logp.push_back(-0.1f * static_cast<float>(t + 1) - static_cast<float>(rank));
    }
  }
  if (rank == 1) {
    term[1 * kEnvs + 0] = 1;
    valid[0 * kEnvs + 1] = 0;
  }
  FakeReply r = FakeReply::Ok();
  r.result.set_policy_version(version);
  auto* e = r.result.mutable_rollout()->add_episodes();
  e->set_env_index(rank * kEnvs);
  e->set_episode_return(10.0 * (rank + 1) + static_cast<double>(iteration));
  e->set_length(5);
  r.result.mutable_rollout()->set_env_steps(TN);
  (*r.result.mutable_metrics())["policy_s"] = 0.2;
  (*r.result.mutable_metrics())["env_s"] = 0.4;
  r.tensors.push_back(TensorFrame::Copy("obs", proto::F32, {kSteps, kEnvs, kObs}, obs.data()));
  r.tensors.push_back(TensorFrame::Copy("actions", proto::I64, {kSteps, kEnvs}, actions.data()));
  r.tensors.push_back(TensorFrame::Copy("logprobs", proto::F32, {kSteps, kEnvs}, logp.data()));
  r.tensors.push_back(TensorFrame::Copy("values", proto::F32, {kSteps, kEnvs}, values.data()));
  r.tensors.push_back(TensorFrame::Copy("rewards", proto::F32, {kSteps, kEnvs}, rewards.data()));
  r.tensors.push_back(TensorFrame::Copy("terminated", proto::U8, {kSteps, kEnvs}, term.data()));
  r.tensors.push_back(TensorFrame::Copy("truncated", proto::U8, {kSteps, kEnvs}, trunc.data()));
  r.tensors.push_back(TensorFrame::Copy("valid", proto::U8, {kSteps, kEnvs}, valid.data()));
  r.tensors.push_back(TensorFrame::FromVector("last_values", last));
  return r;
}

// What a rollout worker answers to rollout_setup: kEnvs CartPole envs.
FakeReply SetupReply() {
  FakeReply r = FakeReply::Ok();
  proto::PolicySpec* s = r.result.mutable_policy_spec();
  s->set_env_id("CartPole-v1");
  s->set_obs_size(kObs);
  s->set_discrete(true);
  s->set_action_size(2);
  s->set_num_envs(kEnvs);
  return r;
}

class PpoLoopTest : public ::testing::Test {
 protected:
  // 2 workers x 2 envs x 3 steps = 12 steps per iteration, 2 iterations.
  JobConfig Config() {
    return TestConfig(
        "job: {algorithm: ppo, seed: 5}\n"
        "env: {id: CartPole-v1, num_envs: 2}\n"
        "rollout: {workers: 2, steps_per_iteration: 3}\n"
        "ppo: {total_steps: 24, gamma: 0.5, gae_lambda: 1.0, return_window: 3}\n"
        "controller: {request_timeout_s: 30}\n");
  }

  absl::Status Run(const JobConfig& config) {
    auto algo = CreateAlgorithm(config);
    if (!algo.ok()) return algo.status();
    actors_ = std::make_unique<FakeActors>(config);
    actors_->AddRoles((*algo)->Roles());
    actors_->On("rollout", Task::kRolloutSetup, [](const FakeWork&) { return SetupReply(); });
    actors_->On("rollout", Task::kLoadWeights, [this](const FakeWork& w) {
      versions_[w.rank] = w.request.load_weights().weights().version();
      return WeightsReply(versions_[w.rank]);
    });
    actors_->On("rollout", Task::kRollout, [this](const FakeWork& w) {
      return Trajectories(w.rank, versions_[w.rank], ++rollouts_[w.rank]);
    });
    actors_->On("trainer", Task::kTrainInit, [](const FakeWork&) { return WeightsReply(0); });
    actors_->On("trainer", Task::kTrainStep, [](const FakeWork& w) {
      FakeReply r = WeightsReply(w.request.train_step().iteration());
      (*r.result.mutable_metrics())["policy_loss"] = -0.25;
      (*r.result.mutable_metrics())["update_s"] = 0.05;
      return r;
    });
    for (auto& [key, script] : overrides_) actors_->On(key.first, key.second, script);
    actors_->set_rejoin(rejoin_);
    absl::Status started = actors_->Start();
    if (!started.ok()) return started;
    ctx_ = std::make_unique<FakeJobContext>(*actors_, config, FreshTestDir());
    if (resume_) ctx_->resume = &*resume_;
    return (*algo)->Run(*ctx_);
  }

  std::string Rollout(int rank) { return actors_->Ids("rollout").at(rank); }
  std::string Trainer() { return actors_->Ids("trainer").at(0); }

  std::unique_ptr<FakeActors> actors_;
  std::unique_ptr<FakeJobContext> ctx_;
  std::map<int, int64_t> versions_, rollouts_;
  std::map<std::pair<std::string, Task>, FakeScript> overrides_;
  bool rejoin_ = false;
  std::string joiner_;  // the peer of an actor that joined
  std::optional<JobCheckpoint> resume_;
  int calls_ = 0;
};

TEST_F(PpoLoopTest, SetupThenRolloutTrainAndBroadcastEachIteration) {
  ASSERT_TRUE(Run(Config()).ok());
  const std::string r0 = Rollout(0), r1 = Rollout(1), tr = Trainer();
  std::vector<std::string> expected = {r0 + " rollout_setup", r1 + " rollout_setup",
                                       tr + " train_init", r0 + " load_weights",
                                       r1 + " load_weights"};
  for (int it = 1; it <= 2; ++it) {
    for (const std::string& e : {r0 + " rollout", r1 + " rollout", tr + " train_step",
                                 r0 + " load_weights", r1 + " load_weights"}) {
      expected.push_back(e);
    }
  }
  EXPECT_EQ(actors_->Log(), expected);
  EXPECT_EQ(ctx_->total_iterations, 2);
  ASSERT_EQ(ctx_->records.size(), 2u);
  EXPECT_EQ(ctx_->ends_at, (std::vector<size_t>{10, 15}));

  auto setups = actors_->Received(Task::kRolloutSetup);
  for (int w = 0; w < 2; ++w) {
    const proto::RolloutSetup& s = setups[w]->request.rollout_setup();
    EXPECT_EQ(s.first_env_index(), w * kEnvs);
    EXPECT_EQ(s.seed(), 5);
    EXPECT_EQ(s.sim_endpoints_size(), 0) << "sim.backend inprocess: no servers";
  }
  const proto::TrainInit& init = actors_->Received(Task::kTrainInit)[0]->request.train_init();
  EXPECT_EQ(init.spec().obs_size(), kObs);
  EXPECT_EQ(init.spec().num_envs(), kEnvs);
  EXPECT_EQ(init.weights_transport(), "shm") << "every actor on one host";
  auto loads = actors_->Received(Task::kLoadWeights);
  ASSERT_EQ(loads.size(), 6u);
  for (size_t i = 0; i < loads.size(); ++i) {
    EXPECT_EQ(loads[i]->request.load_weights().weights().version(), static_cast<int64_t>(i / 2));
    EXPECT_EQ(loads[i]->request.load_weights().weights().checksum(), 1000u + i / 2);
  }
}

TEST_F(PpoLoopTest, TrainerBatchHoldsTheValidStepsWithHandComputedAdvantages) {
  ASSERT_TRUE(Run(Config()).ok());
  auto steps = actors_->Received(Task::kTrainStep);
  ASSERT_EQ(steps.size(), 2u);
  // gamma 0.5, lambda 1, V = 0, r = 1: A = 1.75, 1.5, 1 back from the end of 3 steps; worker 1's
  // env 0 ends at t = 1 (A = 1.5, 1, then 1), env 1's step 0 is dropped.
  const std::vector<float> adv = {1.75f, 1.75f, 1.5f, 1.5f, 1, 1, 1.5f, 1, 1.5f, 1, 1};
  for (size_t it = 0; it < steps.size(); ++it) {
    const FakeWork& w = *steps[it];
    EXPECT_EQ(w.request.train_step().iteration(), static_cast<int64_t>(it) + 1);
    EXPECT_EQ(w.request.train_step().num_iterations(), 2);
    EXPECT_EQ(w.request.train_step().behavior_version(), static_cast<int64_t>(it));
    ASSERT_NE(w.Tensor("obs"), nullptr);
    EXPECT_EQ(w.Tensor("obs")->shape(), (std::vector<int64_t>{11, kObs}));
    EXPECT_EQ(w.Tensor("advantages")->ToVector<float>(), adv);
    EXPECT_EQ(w.Tensor("returns")->ToVector<float>(), adv) << "returns = A + V, V = 0";
    // Worker 0's steps, then worker 1's, time-major; worker 1's (t 0, env 1) is gone.
    const std::vector<float> obs = w.Tensor("obs")->ToVector<float>();
    std::vector<float> first;
    for (int64_t row = 0; row < 11; ++row) first.push_back(obs[row * kObs]);
    EXPECT_EQ(first, (std::vector<float>{0, 1, 10, 11, 20, 21, 100, 110, 111, 120, 121}));
    EXPECT_EQ(obs[1], 0.5f);
    EXPECT_EQ(w.Tensor("actions")->ToVector<int64_t>(),
              (std::vector<int64_t>{0, 1, 1, 0, 0, 1, 1, 0, 1, 1, 0}));
    const std::vector<float> logp = w.Tensor("logprobs")->ToVector<float>();
    EXPECT_FLOAT_EQ(logp[0], -0.1f);
    EXPECT_FLOAT_EQ(logp[10], -1.3f);
    EXPECT_EQ(w.Tensor("values")->ToVector<float>(), std::vector<float>(11, 0.0f));
  }
}

TEST_F(PpoLoopTest, RecordCarriesEpisodesLossesAndVersions) {
  ASSERT_TRUE(Run(Config()).ok());
  const auto& r = ctx_->records;
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].step, 1);
  EXPECT_EQ(r[0].metrics.at("samples"), 11);
  EXPECT_EQ(r[0].metrics.at("env_steps"), 12);
  EXPECT_EQ(r[1].metrics.at("env_steps"), 24);
  EXPECT_EQ(r[0].metrics.at("episodes"), 2);
  EXPECT_EQ(r[1].metrics.at("episodes"), 4);
  // Returns 11 and 21, then 12 and 22; the window keeps the last 3.
  EXPECT_DOUBLE_EQ(r[0].metrics.at("episodic_return"), 16.0);
  EXPECT_DOUBLE_EQ(r[1].metrics.at("episodic_return"), (21.0 + 12 + 22) / 3);
  EXPECT_EQ(r[1].metrics.at("episode_length"), 5);
  EXPECT_EQ(r[1].metrics.at("policy_version"), 2);
  EXPECT_EQ(r[1].metrics.at("version_lag"), 0);
  EXPECT_EQ(r[1].metrics.at("weight_bytes"), 16);
  EXPECT_EQ(r[1].metrics.at("policy_loss"), -0.25);
  EXPECT_EQ(r[1].timings.at("update_s"), 0.05);
  EXPECT_FALSE(r[1].metrics.contains("update_s"));
  EXPECT_DOUBLE_EQ(r[1].timings.at("policy_s"), 0.2);
  EXPECT_DOUBLE_EQ(r[1].timings.at("env_s"), 0.4);
}

TEST_F(PpoLoopTest, LateRolloutStillJoinsTheBatchInWorkerOrder) {
  overrides_[{"rollout", Task::kRollout}] = [this](const FakeWork& w) {
    FakeReply r = Trajectories(w.rank, versions_[w.rank], ++rollouts_[w.rank]);
    if (w.rank == 0) r.delay_pumps = 5;  // worker 1 answers first
    return r;
  };
  ASSERT_TRUE(Run(Config()).ok());
  const std::vector<float> obs =
      actors_->Received(Task::kTrainStep)[0]->Tensor("obs")->ToVector<float>();
  EXPECT_EQ(obs[0], 0.0f);
  EXPECT_EQ(obs[6 * kObs], 100.0f);
}

TEST_F(PpoLoopTest, RepeatedRepliesAreIgnored) {
  overrides_[{"rollout", Task::kRollout}] = [this](const FakeWork& w) {
    FakeReply r = Trajectories(w.rank, versions_[w.rank], ++rollouts_[w.rank]);
    r.twice = true;
    return r;
  };
  ASSERT_TRUE(Run(Config()).ok());
  EXPECT_EQ(actors_->controller().drops().duplicate_results, 4u) << "2 workers x 2 iterations";
  const auto& r = ctx_->records;
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[1].metrics.at("episodes"), 4) << "each episode counted once";
  EXPECT_EQ(r[1].metrics.at("env_steps"), 24);
  EXPECT_EQ(actors_->Received(Task::kTrainStep)[1]->Tensor("obs")->shape()[0], 11);
}

TEST_F(PpoLoopTest, MissingTensorNamesTheWorkerAndTheTensor) {
  overrides_[{"rollout", Task::kRollout}] = [this](const FakeWork& w) {
    FakeReply r = Trajectories(w.rank, versions_[w.rank], 1);
    if (w.rank == 1) r.tensors.erase(r.tensors.begin() + 4);  // rewards
    return r;
  };
  absl::Status s = Run(Config());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_EQ(s.message(), Rollout(1) +
                             " sent a rollout without a valid 'rewards' tensor (f32, 6 "
                             "values)");
  EXPECT_TRUE(actors_->Received(Task::kTrainStep).empty());
}

TEST_F(PpoLoopTest, FailedTrainStepNamesTheTrainerAndItsMessage) {
  overrides_[{"trainer", Task::kTrainStep}] = [](const FakeWork&) {
    return FakeReply::Fail("policy loss is NaN");
  };
  absl::Status s = Run(Config());
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_NE(s.message().find("failed on " + Trainer() + ": policy loss is NaN"), std::string::npos)
      << s;
  EXPECT_TRUE(ctx_->records.empty());
}

// A worker that heartbeats but never answers is declared dead at the request deadline; its
// batch is stepped by the other worker, and the job goes on.
TEST_F(PpoLoopTest, RolloutThatNeverAnswersMeetsTheDeadlineAndItsBatchMovesOn) {
  overrides_[{"rollout", Task::kRollout}] = [this](const FakeWork& w) {
    if (w.rank == 1) return FakeReply::Never();
    return Trajectories(w.rank, versions_[w.rank], 1);
  };
  ASSERT_TRUE(Run(Config()).ok());
  ASSERT_EQ(ctx_->records.size(), 2u);
  for (const IterationRecord& r : ctx_->records) EXPECT_EQ(r.metrics.at("samples"), 12);
  const ActorInfo* lost = actors_->controller().actors().Find(Rollout(1));
  EXPECT_NE(lost->last_loss.find("did not finish work"), std::string::npos) << lost->last_loss;
  EXPECT_NE(lost->last_loss.find("within 30 s (controller.request_timeout_s)"), std::string::npos);
}

TEST_F(PpoLoopTest, WorkerServingAnotherVersionIsAnError) {
  overrides_[{"rollout", Task::kLoadWeights}] = [this](const FakeWork& w) {
    versions_[w.rank] = w.request.load_weights().weights().version();
    return WeightsReply(w.rank == 1 ? 0 : versions_[w.rank]);
  };
  absl::Status s = Run(Config());
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_EQ(s.message(), Rollout(1) + " loaded version 0 instead of 1");
}

TEST_F(PpoLoopTest, WorkersWithDifferentEnvsAreRefused) {
  overrides_[{"rollout", Task::kRolloutSetup}] = [](const FakeWork& w) {
    FakeReply r = FakeReply::Ok();
    proto::PolicySpec* s = r.result.mutable_policy_spec();
    s->set_env_id(w.rank == 0 ? "CartPole-v1" : "Pendulum-v1");
    s->set_obs_size(w.rank == 0 ? kObs : 3);
    s->set_discrete(w.rank == 0);
    s->set_action_size(w.rank == 0 ? 2 : 1);
    s->set_num_envs(kEnvs);
    return r;
  };
  absl::Status s = Run(Config());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find(Rollout(1) + "'s envs (Pendulum-v1, 2 envs) differ from " +
                             Rollout(0) + "'s"),
            std::string::npos)
      << s;
  EXPECT_TRUE(actors_->Received(Task::kTrainInit).empty());
}

// 3 iterations; rollout-1 dies on its second rollout (iteration 2).
class PpoWorkerLossTest : public PpoLoopTest {
 protected:
  JobConfig Config3() {
    JobConfig c = Config();
    c.ppo.total_steps = 36;
    return c;
  }
  void CrashSecondRolloutOfWorker1() {
    overrides_[{"rollout", Task::kRollout}] = [this](const FakeWork& w) {
      if (w.rank == 1 && ++calls_ == 2) return FakeReply::Crash();
      return Trajectories(w.rank, versions_[w.rank], ++rollouts_[w.rank]);
    };
  }
  // The first observation feature of each row of iteration `it`'s train batch.
  std::vector<float> FirstFeature(size_t it) {
    const std::vector<float> obs =
        actors_->Received(Task::kTrainStep).at(it)->Tensor("obs")->ToVector<float>();
    std::vector<float> first;
    for (size_t row = 0; row < obs.size() / kObs; ++row) first.push_back(obs[row * kObs]);
    return first;
  }
};

TEST_F(PpoWorkerLossTest, LostBatchIsSteppedByALiveWorkerAndTheReplacementIsSetUpFirst) {
  rejoin_ = true;
  CrashSecondRolloutOfWorker1();
  ASSERT_TRUE(Run(Config3()).ok());
  const std::string r0 = Rollout(0), r1 = Rollout(1), tr = Trainer();
  std::vector<std::string> log = actors_->Log();
  // Iteration 2: rollout-1's batch goes to rollout-0 once rollout-1 is declared dead; the
  // weights go to rollout-0 alone. Iteration 3: the replacement sets its envs up again and
  // loads version 2 before it steps them.
  ASSERT_GE(log.size(), 12u);
  const std::vector<std::string> tail(log.end() - 12, log.end());
  EXPECT_EQ(tail,
            (std::vector<std::string>{
                r0 + " rollout", r1 + " rollout", r0 + " rollout", tr + " train_step",
                r0 + " load_weights", r1 + " rollout_setup", r1 + " load_weights", r0 + " rollout",
                r1 + " rollout", tr + " train_step", r0 + " load_weights", r1 + " load_weights"}));
  EXPECT_EQ(
      actors_->Received(Task::kLoadWeights).back()->request.load_weights().weights().version(), 3);
  const auto& r = ctx_->records;
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[1].metrics.at("faults/requeued_batches"), 1);
  EXPECT_EQ(r[1].metrics.at("faults/episodes_cut"), kEnvs) << "rollout-1's envs were mid-episode";
  EXPECT_EQ(r[1].metrics.at("samples"), 12) << "both batches from rollout-0 (no invalid step)";
  EXPECT_EQ(FirstFeature(1), (std::vector<float>{0, 1, 10, 11, 20, 21, 0, 1, 10, 11, 20, 21}));
  EXPECT_EQ(r[2].metrics.at("samples"), 11) << "each worker its own batch again";
  EXPECT_FALSE(r[0].metrics.contains("faults/episodes_cut")) << "no fault yet";
  EXPECT_EQ(actors_->controller().faults().actors_lost, 1u);
  EXPECT_EQ(actors_->controller().faults().works_given_back, 1u);
}

TEST_F(PpoWorkerLossTest, WithoutAReplacementTheLiveWorkerStepsEveryBatch) {
  CrashSecondRolloutOfWorker1();
  ASSERT_TRUE(Run(Config3()).ok());
  const auto& r = ctx_->records;
  ASSERT_EQ(r.size(), 3u);
  for (size_t it : {1, 2}) {
    EXPECT_EQ(r[it].metrics.at("samples"), 12) << it;
    EXPECT_EQ(FirstFeature(it).size(), 12u);
  }
  EXPECT_EQ(r[2].metrics.at("env_steps"), 36) << "no step lost";
  EXPECT_EQ(r[2].metrics.at("faults/episodes_cut"), kEnvs);
}

// Lost before the first rollout (killed while setting its envs up, or while loading version
// 0): the job starts with the live worker, and the replacement is set up like any other.
TEST_F(PpoWorkerLossTest, AWorkerLostDuringSetupIsReplacedAndTheJobRuns) {
  rejoin_ = true;
  overrides_[{"rollout", Task::kRolloutSetup}] = [this](const FakeWork& w) {
    if (w.rank == 1 && ++calls_ == 1) return FakeReply::Crash();
    return SetupReply();
  };
  absl::Status run = Run(Config3());
  ASSERT_TRUE(run.ok()) << run;
  ASSERT_EQ(ctx_->records.size(), 3u);
  EXPECT_EQ(ctx_->records.back().metrics.at("env_steps"), 36) << "no step lost";
  EXPECT_EQ(actors_->Received(Task::kRolloutSetup).size(), 3u) << "the replacement set up";
  EXPECT_EQ(actors_->controller().faults().actors_lost, 1u);
}

TEST_F(PpoWorkerLossTest, AWorkerLostLoadingTheFirstWeightsIsReplacedAndTheJobRuns) {
  rejoin_ = true;
  overrides_[{"rollout", Task::kLoadWeights}] = [this](const FakeWork& w) {
    if (w.rank == 1 && ++calls_ == 1) return FakeReply::Crash();
    versions_[w.rank] = w.request.load_weights().weights().version();
    return WeightsReply(versions_[w.rank]);
  };
  absl::Status run = Run(Config3());
  ASSERT_TRUE(run.ok()) << run;
  ASSERT_EQ(ctx_->records.size(), 3u);
  EXPECT_EQ(ctx_->records.back().metrics.at("env_steps"), 36) << "no step lost";
  EXPECT_EQ(actors_->controller().faults().actors_lost, 1u);
}

// Elastic rollout workers (rollout.max_staleness 0): one configured worker, room for one more.
class PpoElasticTest : public PpoLoopTest {
 protected:
  using Units = std::map<std::string, double>;
  // 1 unit x 2 envs x 3 steps = 6 steps per iteration, 4 iterations.
  JobConfig ElasticConfig() {
    JobConfig c = Config();
    c.rollout.workers = 1;
    c.rollout.max_workers = 2;
    c.ppo.total_steps = 24;
    return c;
  }
  // Iteration `it`'s slot -> units stepped (the rollout/<slot>/batches metrics).
  std::map<std::string, double> UnitsBySlot(size_t it) {
    std::map<std::string, double> out;
    for (const auto& [k, v] : ctx_->records.at(it).metrics) {
      if (absl::StartsWith(k, "rollout/")) out[k] = v;
    }
    return out;
  }
};

TEST_F(PpoElasticTest, JoinerIsSetUpLikeAReplacementAndDealtUnitsWithoutAFault) {
  overrides_[{"trainer", Task::kTrainStep}] = [this](const FakeWork& w) {
    if (w.request.train_step().iteration() == 1) joiner_ = actors_->Join("rollout");
    FakeReply r = WeightsReply(w.request.train_step().iteration());
    (*r.result.mutable_metrics())["policy_loss"] = -0.25;
    return r;
  };
  ASSERT_TRUE(Run(ElasticConfig()).ok());
  const std::string r0 = Rollout(0), r1 = actors_->IdOf(joiner_), tr = Trainer();
  ASSERT_EQ(r1, "rollout-1");
  // Iteration 1 on rollout-0 alone; the joiner gets its envs and version 1 before iteration 2,
  // whose one unit it steps; then the unit alternates, and both load every version.
  const std::vector<std::string> log = actors_->Log();
  ASSERT_GE(log.size(), 10u);
  EXPECT_EQ(
      std::vector<std::string>(log.begin() + 4, log.begin() + 10),
      (std::vector<std::string>{tr + " train_step", r0 + " load_weights", r1 + " rollout_setup",
                                r1 + " load_weights", r1 + " rollout", tr + " train_step"}));
  const auto setups = actors_->Received(Task::kRolloutSetup);
  ASSERT_EQ(setups.size(), 2u);
  EXPECT_EQ(setups[1]->request.rollout_setup().first_env_index(), kEnvs) << "its own envs";
  EXPECT_EQ(setups[1]->request.rollout_setup().seed(), setups[0]->request.rollout_setup().seed());
  EXPECT_EQ(actors_->Received(Task::kLoadWeights)[2]->request.load_weights().weights().version(),
            1);
  const auto& r = ctx_->records;
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(UnitsBySlot(0), (Units{{"rollout/0/batches", 1}}));
  EXPECT_EQ(UnitsBySlot(1), (Units{{"rollout/1/batches", 1}}));
  EXPECT_EQ(UnitsBySlot(2), (Units{{"rollout/0/batches", 1}}));
  EXPECT_EQ(UnitsBySlot(3), (Units{{"rollout/1/batches", 1}}));
  for (size_t i = 0; i < r.size(); ++i) {
    EXPECT_EQ(r[i].metrics.at("env_steps"), kEnvs * kSteps * (i + 1)) << "one unit per iteration";
    EXPECT_FALSE(r[i].metrics.contains("faults/episodes_cut")) << "a join is not a fault";
  }
  EXPECT_EQ(actors_->controller().faults().actors_lost, 0u);
  EXPECT_EQ(actors_->controller().elastic().joins, 1u);
}

TEST_F(PpoElasticTest, LeaverHandsItsUnitBackWhichIsDealtAgainWithoutAFault) {
  JobConfig c = Config();  // two workers, both may leave
  c.ppo.total_steps = 36;
  overrides_[{"rollout", Task::kRollout}] = [this](const FakeWork& w) {
    if (w.rank == 1 && ++calls_ == 2) return FakeReply::AndLeave(FakeReply::Never());
    return Trajectories(w.rank, versions_[w.rank], ++rollouts_[w.rank]);
  };
  ASSERT_TRUE(Run(c).ok());
  const std::string r0 = Rollout(0), r1 = Rollout(1);
  const auto& r = ctx_->records;
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(UnitsBySlot(0), (Units{{"rollout/0/batches", 1}, {"rollout/1/batches", 1}}));
  EXPECT_EQ(UnitsBySlot(1), (Units{{"rollout/0/batches", 2}})) << "its unit dealt again";
  EXPECT_EQ(UnitsBySlot(2), (Units{{"rollout/0/batches", 2}})) << "its slot stays unused";
  EXPECT_EQ(r[2].metrics.at("env_steps"), 36) << "no step lost";
  for (const auto& rec : r) {
    EXPECT_FALSE(rec.metrics.contains("faults/requeued_batches")) << "a leave is not a fault";
  }
  EXPECT_EQ(r[1].metrics.at("elastic/episodes_cut"), kEnvs) << "its envs were mid-episode";
  EXPECT_EQ(actors_->controller().faults().actors_lost, 0u);
  EXPECT_EQ(actors_->controller().elastic().leaves, 1u);
  EXPECT_EQ(actors_->controller().elastic().works_handed_back, 1u);
  std::vector<std::string> to_r1;
  for (const std::string& line : actors_->Log()) {
    if (line.starts_with(r1 + " ")) to_r1.push_back(line.substr(r1.size() + 1));
  }
  EXPECT_EQ(to_r1, (std::vector<std::string>{"rollout_setup", "load_weights", "rollout",
                                             "load_weights", "rollout"}))
      << "nothing after the rollout it left with";
}

TEST_F(PpoElasticTest, AJoinerInTheSlotOfALeaverIsAJoinEvenBeforeTheLoopSawTheLeave) {
  JobConfig c = Config();
  c.ppo.total_steps = 36;
  // rollout-1 leaves after its rollout of iteration 2, and a new worker takes its slot while
  // iteration 2 trains: by the next deal the slot is live again, with a new registration.
  overrides_[{"rollout", Task::kRollout}] = [this](const FakeWork& w) {
    FakeReply r = Trajectories(w.rank, versions_[w.rank], ++rollouts_[w.rank]);
    if (w.rank == 1 && rollouts_[w.rank] == 2) return FakeReply::AndLeave(std::move(r));
    return r;
  };
  overrides_[{"trainer", Task::kTrainStep}] = [this](const FakeWork& w) {
    if (w.request.train_step().iteration() == 2) joiner_ = actors_->Join("rollout");
    FakeReply r = WeightsReply(w.request.train_step().iteration());
    (*r.result.mutable_metrics())["policy_loss"] = -0.25;
    return r;
  };
  ASSERT_TRUE(Run(c).ok());
  ASSERT_EQ(actors_->IdOf(joiner_), Rollout(1));
  const auto& r = ctx_->records;
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[2].metrics.at("elastic/episodes_cut"), kEnvs) << "the leaver's envs";
  for (const auto& rec : r) EXPECT_FALSE(rec.metrics.contains("faults/episodes_cut"));
  EXPECT_EQ(actors_->Received(Task::kRolloutSetup).size(), 3u) << "the joiner set up its envs";
  EXPECT_EQ(actors_->controller().faults().actors_lost, 0u);
  EXPECT_EQ(UnitsBySlot(2), (Units{{"rollout/0/batches", 1}, {"rollout/1/batches", 1}}));
}

// A checkpoint saves the workers set up at that moment: a slot joined but not yet set up, or
// vacant, or left, has no state to save.
TEST_F(PpoElasticTest, CheckpointsSaveTheWorkersSetUpAtThatMoment) {
  JobConfig c = ElasticConfig();
  c.checkpoint.every = 1;
  c.ppo.total_steps = 12;
  overrides_[{"trainer", Task::kTrainStep}] = [this](const FakeWork& w) {
    if (w.request.train_step().iteration() == 1) joiner_ = actors_->Join("rollout");
    return WeightsReply(w.request.train_step().iteration());
  };
  for (const char* role : {"rollout", "trainer"}) {
    overrides_[{role, Task::kSaveState}] = [](const FakeWork&) { return FakeReply::Ok(); };
  }
  ASSERT_TRUE(Run(c).ok());
  const std::string run = ctx_->run_dir().path();
  std::vector<std::string> dirs;
  for (const FakeWork* w : actors_->Received(Task::kSaveState)) {
    dirs.push_back(w->request.save_state().dir().substr(run.size()));
  }
  EXPECT_EQ(dirs, (std::vector<std::string>{
                      "/checkpoints/step_1/state/rollout-0", "/checkpoints/step_1/state/trainer-0",
                      "/checkpoints/step_2/state/rollout-0", "/checkpoints/step_2/state/rollout-1",
                      "/checkpoints/step_2/state/trainer-0"}));
  std::ifstream in(run + "/checkpoints/step_1/state/controller.json");
  const nlohmann::json saved = nlohmann::json::parse(in, nullptr, false);
  EXPECT_EQ(saved["reward_scalers"].size(), 2u) << "one per slot, vacant ones included";
}

// Resumed from a checkpoint taken after rollout-1 had left: rollout-0 restores its saved
// state; rollout-1 (launched again with the job) has none and keeps the envs just set up.
TEST_F(PpoElasticTest, AResumedJobRestoresOnlyTheWorkersTheCheckpointHolds) {
  JobConfig c = Config();
  c.checkpoint.every = 1;
  c.ppo.total_steps = 36;
  for (const char* role : {"rollout", "trainer"}) {
    overrides_[{role, Task::kSaveState}] = [](const FakeWork&) { return FakeReply::Ok(); };
  }
  overrides_[{"rollout", Task::kLoadWeights}] = [this](const FakeWork& w) {
    versions_[w.rank] = w.request.load_weights().weights().version();
    FakeReply r = WeightsReply(versions_[w.rank]);
    if (w.rank == 1 && versions_[w.rank] == 1) return FakeReply::AndLeave(std::move(r));
    return r;
  };
  ASSERT_TRUE(Run(c).ok());
  std::ifstream in(ctx_->run_dir().path() + "/checkpoints/step_1/state/controller.json");
  const nlohmann::json saved = nlohmann::json::parse(in, nullptr, false);
  // Outside the run root, which the next Run empties; the fakes write no state of their own.
  const std::string state = ::testing::TempDir() + "rlforge_ppo_elastic_resume/state";
  std::filesystem::remove_all(state);
  std::filesystem::create_directories(state + "/rollout-0");
  resume_ = JobCheckpoint{1, state, saved};
  overrides_.erase({"rollout", Task::kLoadWeights});
  overrides_[{"trainer", Task::kLoadState}] = [](const FakeWork&) { return WeightsReply(1); };
  overrides_[{"rollout", Task::kLoadState}] = [](const FakeWork&) { return FakeReply::Ok(); };
  versions_.clear();
  rollouts_.clear();
  ASSERT_TRUE(Run(c).ok());
  std::vector<std::string> loads;
  for (const FakeWork* w : actors_->Received(Task::kLoadState)) {
    loads.push_back(w->actor_id + " " + w->request.load_state().dir());
  }
  EXPECT_EQ(loads, (std::vector<std::string>{Trainer() + " " + state + "/" + Trainer(),
                                             Rollout(0) + " " + state + "/" + Rollout(0)}));
  ASSERT_EQ(ctx_->records.size(), 2u);
  EXPECT_EQ(ctx_->records[0].step, 2);
}

// ppo.normalize_reward: a leaver's last unit is scaled before its normaliser restarts the
// episodes its envs were running, so no running return outlives its episodes. rollout-0 is
// slow, so rollout-1's result and Leave are seen before the iteration's last deal.
TEST_F(PpoElasticTest, ALeaversNormaliserSeesItsLastUnitBeforeItsEpisodesRestart) {
  JobConfig c = Config();
  c.ppo.normalize_reward = true;
  c.checkpoint.every = 1;
  for (const char* role : {"rollout", "trainer"}) {
    overrides_[{role, Task::kSaveState}] = [](const FakeWork&) { return FakeReply::Ok(); };
  }
  overrides_[{"rollout", Task::kRollout}] = [this](const FakeWork& w) {
    FakeReply r = Trajectories(w.rank, versions_[w.rank], ++rollouts_[w.rank]);
    if (w.rank == 1) return FakeReply::AndLeave(std::move(r));
    if (rollouts_[0] == 1) r.delay_pumps = 3;
    return r;
  };
  ASSERT_TRUE(Run(c).ok());
  std::ifstream in(ctx_->run_dir().path() + "/checkpoints/step_2/state/controller.json");
  const nlohmann::json scaler = nlohmann::json::parse(in, nullptr, false)["reward_scalers"][1];
  // Its valid steps (the statistics start from a count of 1e-4).
  EXPECT_NEAR(scaler["count"].get<double>(), kSteps * kEnvs - 1, 1e-3) << scaler.dump();
  EXPECT_EQ(scaler["returns"], nlohmann::json::array({0.0, 0.0})) << scaler.dump();
}

TEST_F(PpoElasticTest, BelowMinWorkersTheLoopWaitsAndFailsNamingTheKey) {
  JobConfig c = Config();
  c.rollout.min_workers = 2;
  c.ppo.total_steps = 36;
  overrides_[{"rollout", Task::kLoadWeights}] = [this](const FakeWork& w) {
    versions_[w.rank] = w.request.load_weights().weights().version();
    FakeReply r = WeightsReply(versions_[w.rank]);
    if (w.rank == 1 && versions_[w.rank] == 1) return FakeReply::AndLeave(std::move(r));
    return r;
  };
  absl::Status s = Run(c);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rollout.min_workers"), std::string::npos) << s;
  EXPECT_EQ(ctx_->records.size(), 1u) << "iteration 2 never starts below the minimum";
}

// rollout.max_staleness: 0 is the synchronous loop: the same requests in the same order and
// the same records as a job without the key.
TEST_F(PpoLoopTest, StalenessZeroIsTheSynchronousLoop) {
  ASSERT_TRUE(Run(Config()).ok());
  const std::vector<std::string> log = actors_->Log();
  const std::vector<IterationRecord> records = ctx_->records;
  JobConfig zero = Config();
  zero.rollout.max_staleness = 0;
  versions_.clear();
  rollouts_.clear();
  ASSERT_TRUE(Run(zero).ok());
  EXPECT_EQ(actors_->Log(), log);
  ASSERT_EQ(ctx_->records.size(), records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    EXPECT_EQ(ctx_->records[i].metrics, records[i].metrics) << i;
    EXPECT_FALSE(ctx_->records[i].metrics.contains("version_lag_mean")) << "no async metric";
    EXPECT_TRUE(ctx_->records[i].timings.contains("trainer_idle_share"));
    EXPECT_TRUE(ctx_->records[i].timings.contains("stepper_idle_share"));
  }
}

// rollout.max_staleness k >= 1 against scripted actors: each rollout writes the version it
// was stepped with into its observations' second feature, so every trained sample's
// behaviour version can be read back from the train step's batch.
class PpoStalenessTest : public PpoLoopTest, public ::testing::WithParamInterface<int64_t> {
 protected:
  // 2 workers x 2 envs x 3 steps, 6 iterations; training takes a few pumps, rollouts one.
  JobConfig StaleConfig(int64_t k) {
    JobConfig c = Config();
    c.ppo.total_steps = 72;
    c.rollout.max_staleness = k;
    return c;
  }
  void ScriptSlowTrainer(int train_pumps) {
    overrides_[{"trainer", Task::kTrainStep}] = [train_pumps](const FakeWork& w) {
      FakeReply r = WeightsReply(w.request.train_step().iteration());
      r.delay_pumps = train_pumps;
      return r;
    };
  }
  FakeReply TaggedTrajectories(const FakeWork& w) {
    FakeReply r = Trajectories(w.rank, versions_[w.rank], ++rollouts_[w.rank]);
    std::vector<float> obs = r.tensors[0].ToVector<float>();
    for (size_t i = 1; i < obs.size(); i += kObs) obs[i] = static_cast<float>(versions_[w.rank]);
    r.tensors[0] = TensorFrame::Copy("obs", proto::F32, {kSteps, kEnvs, kObs}, obs.data());
    r.delay_pumps = 1;
    return r;
  }
  void ScriptTaggedRollouts() {
    overrides_[{"rollout", Task::kRollout}] = [this](const FakeWork& w) {
      return TaggedTrajectories(w);
    };
  }
  // The behaviour version of every row of iteration `it`'s train batch.
  std::vector<int64_t> RowVersions(size_t it) {
    const std::vector<float> obs =
        actors_->Received(Task::kTrainStep).at(it)->Tensor("obs")->ToVector<float>();
    std::vector<int64_t> v;
    for (size_t row = 0; row < obs.size() / kObs; ++row) v.push_back(obs[row * kObs + 1]);
    return v;
  }
  // Checks every trained row against the bound; returns the largest lag seen.
  int64_t CheckBound(int64_t k) {
    const auto steps = actors_->Received(Task::kTrainStep);
    int64_t largest = 0;
    for (size_t it = 0; it < steps.size(); ++it) {
      const int64_t trained = static_cast<int64_t>(it);  // the trainer's version at step it+1
      const std::vector<int64_t> rows = RowVersions(it);
      std::vector<double> by_lag(k + 1, 0);
      for (int64_t v : rows) {
        EXPECT_LE(trained - v, k) << "iteration " << it + 1;
        EXPECT_GE(trained - v, 0) << "iteration " << it + 1;
        if (trained - v >= 0 && trained - v <= k) by_lag[trained - v] += 1;
        largest = std::max(largest, trained - v);
      }
      EXPECT_EQ(steps[it]->request.train_step().behavior_version(),
                *std::min_element(rows.begin(), rows.end()));
      const IterationRecord& r = ctx_->records.at(it);
      for (int64_t d = 0; d <= k; ++d) {
        EXPECT_DOUBLE_EQ(r.metrics.at(absl::StrCat("version_lag/", d)),
                         by_lag[d] / static_cast<double>(rows.size()))
            << "iteration " << it + 1 << " lag " << d;
      }
      EXPECT_EQ(r.metrics.at("stale_batches_discarded"), 0) << "the throttle held";
      EXPECT_LE(r.metrics.at("version_lag"), k);
    }
    return largest;
  }
  int calls_ = 0;
};

TEST_P(PpoStalenessTest, NoTrainedSampleLagsMoreThanTheBound) {
  const int64_t k = GetParam();
  ScriptSlowTrainer(6);
  ScriptTaggedRollouts();
  ASSERT_TRUE(Run(StaleConfig(k)).ok());
  ASSERT_EQ(ctx_->records.size(), 6u);
  EXPECT_EQ(CheckBound(k), k) << "a slow trainer lets the workers run the whole bound ahead";
  EXPECT_EQ(ctx_->records.back().metrics.at("env_steps"), 72);
  EXPECT_EQ(ctx_->records.back().metrics.at("policy_version"), 6);
  // The workers stepped while the trainer trained: batch 2's rollouts while it trained batch 1
  // (and batch 3's too with k = 2).
  EXPECT_EQ(ctx_->records[0].metrics.at("rollouts_during_train"), 2 * k);
  // Every worker loaded each version once, in order, between its rollouts.
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<int64_t> loaded;
    for (const FakeWork* w : actors_->Received(Task::kLoadWeights)) {
      if (w->rank == rank) loaded.push_back(w->request.load_weights().weights().version());
    }
    EXPECT_EQ(loaded, (std::vector<int64_t>{0, 1, 2, 3, 4, 5})) << rank << ": 6 is never used";
  }
}

TEST_P(PpoStalenessTest, BatchesAndEpisodesAreThoseOfTheSynchronousLoop) {
  // Untagged rollouts: the same batches as k = 0 (each worker its own slot, in order), so the
  // advantages, samples, episodes and returns match; only the versions differ.
  ASSERT_TRUE(Run(Config()).ok());
  const std::vector<IterationRecord> sync = ctx_->records;
  const std::vector<float> adv =
      actors_->Received(Task::kTrainStep)[1]->Tensor("advantages")->ToVector<float>();
  versions_.clear();
  rollouts_.clear();
  JobConfig c = Config();
  c.rollout.max_staleness = GetParam();
  ASSERT_TRUE(Run(c).ok());
  ASSERT_EQ(ctx_->records.size(), sync.size());
  for (size_t i = 0; i < sync.size(); ++i) {
    for (const char* key : {"samples", "env_steps", "episodes", "episodic_return", "episode_length",
                            "policy_version", "policy_loss"}) {
      EXPECT_EQ(ctx_->records[i].metrics.at(key), sync[i].metrics.at(key)) << key << " " << i;
    }
  }
  EXPECT_EQ(actors_->Received(Task::kTrainStep)[1]->Tensor("advantages")->ToVector<float>(), adv);
}

// A worker lost mid-rollout with k >= 1: its batch is dealt again (to the live worker, then
// the replacement), as in the synchronous loop, and the bound still holds.
TEST_P(PpoStalenessTest, LostWorkersBatchIsDealtAgain) {
  const int64_t k = GetParam();
  rejoin_ = true;
  ScriptSlowTrainer(3);
  overrides_[{"rollout", Task::kRollout}] = [this](const FakeWork& w) {
    if (w.rank == 1 && ++calls_ == 2) return FakeReply::Crash();
    return TaggedTrajectories(w);
  };
  ASSERT_TRUE(Run(StaleConfig(k)).ok());
  ASSERT_EQ(ctx_->records.size(), 6u);
  CheckBound(k);
  const IterationRecord& last = ctx_->records.back();
  EXPECT_EQ(last.metrics.at("env_steps"), 72) << "no batch lost";
  EXPECT_EQ(last.metrics.at("faults/requeued_batches"), 1);
  EXPECT_EQ(last.metrics.at("faults/episodes_cut"), kEnvs);
  EXPECT_EQ(actors_->controller().faults().actors_lost, 1u);
  EXPECT_EQ(actors_->Received(Task::kRolloutSetup).size(), 3u) << "the replacement set up";
}

TEST_P(PpoStalenessTest, FailedRolloutNamesTheWorker) {
  overrides_[{"rollout", Task::kRollout}] = [this](const FakeWork& w) {
    FakeReply r = TaggedTrajectories(w);
    if (w.rank == 1) r.tensors.erase(r.tensors.begin() + 4);  // rewards
    return r;
  };
  absl::Status s = Run(StaleConfig(GetParam()));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_EQ(s.message(), Rollout(1) +
                             " sent a rollout without a valid 'rewards' tensor (f32, 6 "
                             "values)");
  EXPECT_TRUE(actors_->Received(Task::kTrainStep).empty());
}

INSTANTIATE_TEST_SUITE_P(K, PpoStalenessTest, ::testing::Values(1, 2));

}  // namespace
}  // namespace rlforge::testing
