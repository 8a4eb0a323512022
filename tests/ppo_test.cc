// End-to-end PPO jobs: learning, determinism, sim_bridge backends (C++ and
// Python servers), weight transports, and simulator faults.
#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tests/job_process.h"

namespace rlforge::testing {
namespace {

std::string CartPole() { return SourceDir() + "/configs/ppo_cartpole.yaml"; }

// metrics.jsonl without the wall-clock-dependent part.
std::string Reproducible(const std::string& dir) {
  std::string s;
  for (auto& r : ReadMetricsJsonl(dir)) {
    r.erase("timings");
    s += r.dump() + "\n";
  }
  return s;
}

std::pair<int, std::string> RunJob(const std::string& root, const std::string& name,
                                   std::vector<std::string> extra, const std::string& config = "") {
  std::vector<std::string> args = {"run", config.empty() ? CartPole() : config,
                                   "job.run_root=" + root, "job.name=" + name};
  args.insert(args.end(), extra.begin(), extra.end());
  return RunRlforge(args, 300);
}

TEST(PpoTest, CartPoleReachesTheSolvedReturn) {
  std::string root = FreshDir("ppo_solve");
  auto [code, out] = RunJob(root, "s", {"ppo.stop_when_solved=true"});
  ASSERT_EQ(code, 0) << out;
  auto m = ReadMetricsJsonl(root + "/s");
  ASSERT_FALSE(m.empty());
  const auto& last = m.back()["metrics"];
  ASSERT_TRUE(last.contains("solved_at_step")) << out;
  EXPECT_LE(last["solved_at_step"].get<double>(), 200000);
  EXPECT_GE(last["episodic_return"].get<double>(), 475);
  EXPECT_EQ(last["version_lag"].get<double>(), 0);
  EXPECT_EQ(last["policy_version"].get<double>(), static_cast<double>(m.size()));
  EXPECT_TRUE(m.back()["timings"].contains("rollout_s"));
  EXPECT_TRUE(m.back()["timings"].contains("train_s"));
  EXPECT_TRUE(m.back()["timings"].contains("weight_sync_s"));
}

TEST(PpoTest, SameSeedGivesIdenticalMetrics) {
  std::string root = FreshDir("ppo_determinism");
  std::vector<std::string> short_run = {"ppo.total_steps=6000", "job.seed=7"};
  ASSERT_EQ(RunJob(root, "a", short_run).first, 0);
  ASSERT_EQ(RunJob(root, "b", short_run).first, 0);
  std::string a = Reproducible(root + "/a"), b = Reproducible(root + "/b");
  EXPECT_FALSE(a.empty());
  EXPECT_EQ(a, b);
  std::vector<std::string> other = {"ppo.total_steps=6000", "job.seed=8"};
  ASSERT_EQ(RunJob(root, "c", other).first, 0);
  EXPECT_NE(a, Reproducible(root + "/c")) << "the seed must matter";
  // rollout.max_staleness 0 is the synchronous loop, metric for metric.
  std::vector<std::string> k0 = short_run;
  k0.push_back("rollout.max_staleness=0");
  ASSERT_EQ(RunJob(root, "k0", k0).first, 0);
  EXPECT_EQ(a, Reproducible(root + "/k0"));
}

// rollout.max_staleness 1 and 2 on real workers (two, stepping while the trainer trains):
// every iteration's batch is within the bound by the recorded versions, nothing is discarded,
// and the policy still learns.
TEST(PpoTest, StaleRolloutsStayWithinTheBoundAndLearn) {
  std::string root = FreshDir("ppo_stale");
  for (int k : {1, 2}) {
    const std::string name = absl::StrCat("k", k);
    auto [code, out] = RunJob(root, name,
                              {"ppo.total_steps=20480", "rollout.workers=2", "env.num_envs=4",
                               absl::StrCat("rollout.max_staleness=", k)});
    ASSERT_EQ(code, 0) << out;
    auto m = ReadMetricsJsonl(root + "/" + name);
    ASSERT_EQ(m.size(), 80u);
    double largest = 0;
    for (const auto& r : m) {
      const auto& x = r["metrics"];
      EXPECT_LE(x["version_lag"].get<double>(), k) << r.dump();
      EXPECT_EQ(x["stale_batches_discarded"].get<double>(), 0) << r.dump();
      EXPECT_EQ(x["policy_version"].get<double>(), r["step"].get<double>());
      double shares = 0, mean = 0;
      for (int d = 0; d <= k; ++d) {
        const double share = x[absl::StrCat("version_lag/", d)].get<double>();
        shares += share;
        mean += d * share;
      }
      EXPECT_NEAR(shares, 1.0, 1e-12) << r.dump();
      EXPECT_NEAR(x["version_lag_mean"].get<double>(), mean, 1e-12) << r.dump();
      EXPECT_TRUE(x.contains("is_weight_mean")) << r.dump();
      EXPECT_TRUE(r["timings"].contains("stepper_idle_share")) << r.dump();
      largest = std::max(largest, x["version_lag"].get<double>());
    }
    // Batch 2 is stepped by version 0 while batch 1 trains (the first overlap, whatever the
    // timing); later lags depend on how fast the trainer is.
    EXPECT_GE(largest, 1) << "the workers ran ahead of the trainer";
    // Batch 1 is stepped and trained by version 0: the ratio starts at 1, the trainer's
    // logprobs agreeing with those the workers recorded (bit for bit here; a BLAS that rounds
    // rows differently by batch size may move the last bits).
    EXPECT_EQ(m[0]["metrics"]["version_lag"].get<double>(), 0);
    EXPECT_NEAR(m[0]["metrics"]["is_weight_max"].get<double>(), 1.0, 1e-5);
    EXPECT_NEAR(m[0]["metrics"]["is_weight_mean"].get<double>(), 1.0, 1e-5);
    EXPECT_EQ(m[1]["metrics"]["version_lag/1"].get<double>(), 1) << "batch 2: version 0";
    EXPECT_GT(m.back()["metrics"]["episodic_return"].get<double>(),
              m[2]["metrics"]["episodic_return"].get<double>() + 50)
        << "k = " << k << " must still learn";
  }
}

// The same envs behind two sim_bridge servers per worker (over shared memory
// and pipelined, or over ZeroMQ as one batch), weights over ZeroMQ instead of
// shared memory: every reproducible number must be the same.
TEST(PpoTest, SimServersAndZmqWeightsChangeNothingButSpeed) {
  std::string root = FreshDir("ppo_backends");
  std::vector<std::string> base = {"ppo.total_steps=4000", "job.seed=3"};
  ASSERT_EQ(RunJob(root, "local", base).first, 0);
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> v = base;
    v.insert(v.end(), more.begin(), more.end());
    return v;
  };
  auto [code, out] =
      RunJob(root, "servers",
             with({"sim.backend=server", "sim.servers_per_worker=2", "sim.pipeline=true"}));
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(ReadFile(root + "/servers/logs/sim-1.log").find("serving CartPole-v1 x 4"),
            std::string::npos);
  EXPECT_NE(ReadFile(root + "/servers/logs/sim-1.log").find("on shm://"), std::string::npos)
      << "the built-in server on the same host defaults to shared memory";
  auto [icode, iout] =
      RunJob(root, "ipc",
             with({"sim.backend=server", "sim.servers_per_worker=2", "sim.transport=ipc",
                   "sim.pipeline=false", "sim.cpu_affinity=none"}));
  ASSERT_EQ(icode, 0) << iout;
  EXPECT_NE(iout.find("sim placement: not pinned (sim.cpu_affinity none)"), std::string::npos);
  EXPECT_EQ(ReadFile(root + "/ipc/logs/rollout-0.log").find("pinned to cpus"), std::string::npos);
  EXPECT_NE(ReadFile(root + "/ipc/logs/sim-0.log").find("on ipc://"), std::string::npos);
  auto [zcode, zout] = RunJob(root, "zmq", with({"weights.transport=zmq"}));
  ASSERT_EQ(zcode, 0) << zout;
  // Defaults: sim.pipeline auto switches between the two loops mid-run;
  // sim.cpu_affinity auto pins the worker and its servers apart.
  auto [acode, aout] =
      RunJob(root, "auto", with({"sim.backend=server", "sim.servers_per_worker=2"}));
  ASSERT_EQ(acode, 0) << aout;
  std::string worker_log = ReadFile(root + "/auto/logs/rollout-0.log");
  EXPECT_NE(worker_log.find("sim.pipeline auto: "), std::string::npos) << worker_log;
  EXPECT_NE(aout.find("sim placement: "), std::string::npos) << aout;
  if (std::thread::hardware_concurrency() >= 2 && aout.find("not pinned") == std::string::npos) {
    EXPECT_NE(worker_log.find("pinned to cpus "), std::string::npos) << worker_log;
    EXPECT_NE(ReadFile(root + "/auto/logs/sim-0.log").find("serving"), std::string::npos);
  }
  std::string local = Reproducible(root + "/local");
  EXPECT_EQ(local, Reproducible(root + "/servers"));  // shm, pipelined
  EXPECT_EQ(local, Reproducible(root + "/ipc"));      // ZeroMQ, one batch
  EXPECT_EQ(local, Reproducible(root + "/zmq"));
  EXPECT_EQ(local, Reproducible(root + "/auto"));  // one batch, pipelined, then the faster
}

// The bucket stream carries the policy over every transport a control policy has (shm: the
// segment of two versions; zmq: inline through the controller), in one bucket or in several
// (16 KiB against a ~36 KB policy): same seed, the same metrics and the same learned weights
// (the final checkpoint's learner state, byte for byte).
TEST(PpoTest, EveryWeightTransportLearnsTheSamePolicy) {
  const std::string root = FreshDir("ppo_transports");
  const std::vector<std::pair<std::string, std::vector<std::string>>> runs = {
      {"shm", {"weights.transport=shm"}},
      {"zmq", {"weights.transport=zmq"}},
      {"shm_buckets", {"weights.transport=shm", "weights.bucket_mb=0.015625"}},
      {"zmq_buckets", {"weights.transport=zmq", "weights.bucket_mb=0.015625"}},
      {"two_workers_zmq", {"weights.transport=zmq", "rollout.workers=2", "env.num_envs=4"}},
      {"two_workers_shm", {"weights.transport=shm", "rollout.workers=2", "env.num_envs=4"}}};
  for (const auto& [name, keys] : runs) {
    std::vector<std::string> args = {"ppo.total_steps=2048", "job.seed=5", "checkpoint.every=8"};
    args.insert(args.end(), keys.begin(), keys.end());
    auto [code, out] = RunJob(root, name, args);
    ASSERT_EQ(code, 0) << name << "\n" << out;
    EXPECT_NE(out.find("weights via " + keys[0].substr(keys[0].find('=') + 1)), std::string::npos)
        << out;
  }
  const std::string learner = "/checkpoints/step_8/state/trainer-0/learner.pt";
  for (const auto& [a, b] : {std::pair{"shm", "zmq"}, std::pair{"shm", "shm_buckets"},
                             std::pair{"shm", "zmq_buckets"},
                             std::pair{"two_workers_shm", "two_workers_zmq"}}) {
    SCOPED_TRACE(std::string(a) + " against " + b);
    EXPECT_EQ(Reproducible(root + "/" + a), Reproducible(root + "/" + b));
    const std::string wa = ReadFile(root + "/" + a + learner);
    ASSERT_FALSE(wa.empty());
    EXPECT_TRUE(wa == ReadFile(root + "/" + b + learner)) << "the learned weights differ";
  }
}

TEST(PpoTest, TwoRolloutWorkersShareTheBatch) {
  std::string root = FreshDir("ppo_two");
  auto [code, out] =
      RunJob(root, "w", {"ppo.total_steps=4096", "rollout.workers=2", "env.num_envs=4"});
  ASSERT_EQ(code, 0) << out;
  auto m = ReadMetricsJsonl(root + "/w");
  ASSERT_FALSE(m.empty());
  EXPECT_EQ(m[0]["metrics"]["env_steps"].get<double>(), 2 * 4 * 32);
  EXPECT_TRUE(std::ifstream(root + "/w/logs/rollout-1.log").good());
}

TEST(PpoTest, PurePythonEnvTrainsOverSimBridge) {
  std::string root = FreshDir("ppo_python");
  std::string script = SourceDir() + "/sim_bridge/python/examples/cartpole_py.py";
  auto [code, out] =
      RunJob(root, "py",
             {"ppo.total_steps=30000", "sim.backend=server", "env.id=PyCartPole-v0",
              "sim.command=[python3, " + script + ", --bind, '{bind}', --num-envs, '{num_envs}']"});
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(ReadFile(root + "/py/logs/sim-0.log").find("serving PyCartPole-v0 x 8"),
            std::string::npos);
  auto m = ReadMetricsJsonl(root + "/py");
  ASSERT_GT(m.size(), 20u);
  double first = m[5]["metrics"]["episodic_return"], last = m.back()["metrics"]["episodic_return"];
  EXPECT_GT(last, first + 50) << "the policy must improve against the Python env";
}

// Issue 42: env.id CartPole-v1 with a server of PyCartPole-v0 trained on PyCartPole-v0 in
// silence (config.resolved.yaml still said CartPole-v1); now set-up stops naming both.
TEST(PpoTest, EnvIdWasSilentlyReplacedByTheServedEnv) {
  std::string root = FreshDir("ppo_env_id");
  std::string script = SourceDir() + "/sim_bridge/python/examples/cartpole_py.py";
  auto [code, out] =
      RunJob(root, "e",
             {"ppo.total_steps=4096", "sim.backend=server", "launch.max_restarts=0",
              "dashboard.enabled=false",
              "sim.command=[python3, " + script + ", --bind, '{bind}', --num-envs, '{num_envs}']"});
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("sim server sim-0 (ipc://"), std::string::npos) << out;
  EXPECT_NE(out.find("serves env 'PyCartPole-v0', but the job's env.id is 'CartPole-v1'"),
            std::string::npos)
      << out;
  EXPECT_TRUE(ReadMetricsJsonl(root + "/e").empty()) << "no iteration may run on the wrong env";
}

struct FaultCase {
  const char* fault;
  const char* expect;
};

class SimFaultTest : public ::testing::TestWithParam<FaultCase> {};

TEST_P(SimFaultTest, StopsCleanlyNamingServerAndEnv) {
  const FaultCase& f = GetParam();
  std::string root = FreshDir(std::string("ppo_fault_") + f.fault);
  std::string script = SourceDir() + "/sim_bridge/python/tests/faulty_env.py";
  auto [code, out] = RunJob(root, "f",
                            {"env.num_envs=2", "sim.backend=server", "sim.step_timeout_s=3",
                             "launch.max_restarts=0", "env.id=Faulty-v0",
                             "sim.command=[python3, " + script +
                                 ", --bind, '{bind}', --num-envs, "
                                 "'{num_envs}', --fault, " +
                                 f.fault + "]"});
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find(f.expect), std::string::npos) << out;
  EXPECT_NE(ReadFile(root + "/f/status.json").find("\"failed\""), std::string::npos);
  EXPECT_EQ(out.find("terminate called"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Faults, SimFaultTest,
                         ::testing::Values(FaultCase{"nan", "sim server sim-0 (ipc://"},
                                           FaultCase{"raise",
                                                     "RuntimeError: the simulator lost its mind"},
                                           FaultCase{"hang", "did not answer within 3 s"},
                                           FaultCase{"crash", "sim-0 (pid"}),
                         [](const auto& info) { return std::string(info.param.fault); });

// A sim server that dies mid-run is started again and takes its worker with it: the worker's
// replacement connects to the new server, the episodes under way are dropped and counted, and
// the job finishes. With no restart left the job stops naming the server.
TEST(PpoTest, AKilledSimServerIsRestartedWithItsWorker) {
  std::string root = FreshDir("ppo_sim_restart");
  std::vector<std::string> args = {"run",
                                   CartPole(),
                                   "job.run_root=" + root,
                                   "job.name=r",
                                   "ppo.total_steps=25600",
                                   "rollout.workers=2",
                                   "sim.backend=server",
                                   "sim.servers_per_worker=2",
                                   "launch.restart_backoff_s=0.1",
                                   "dashboard.enabled=false"};
  JobProcess job(args, root + "/r.txt");
  // Killed once the job is under way (a few iterations done).
  ASSERT_TRUE(WaitForMetrics(root + "/r", 5, 120)) << job.Output();
  const int pid = StartedPid(job.Output(), "sim-2");
  ASSERT_GT(pid, 0) << job.Output();
  kill(pid, SIGKILL);
  ASSERT_EQ(job.Wait(300).value_or(-1), 0) << job.Output();
  const std::string events = ReadFile(root + "/r/events.jsonl");
  const std::vector<std::string> seen_list = ReadEvents(root + "/r");
  const std::set<std::string> seen(seen_list.begin(), seen_list.end());  // "event actor"
  // sim-2 serves rollout-1 (servers are dealt to workers in order, two each).
  for (const char* want : {"lost sim-2", "restart sim-2", "lost rollout-1", "restart rollout-1"}) {
    EXPECT_TRUE(seen.count(want)) << want << " is not in events.jsonl:\n" << events;
  }
  auto records = ReadMetricsJsonl(root + "/r");
  ASSERT_EQ(records.size(), 50u);  // 25600 steps, 2 workers x 8 envs x 32 steps each
  EXPECT_GT(records.back()["metrics"]["faults/episodes_cut"].get<double>(), 0) << events;

  auto [code, fatal] = RunRlforge(
      {"run", CartPole(), "job.run_root=" + root, "job.name=f", "ppo.total_steps=25600",
       "sim.backend=server", "launch.max_restarts=0", "dashboard.enabled=false", "env.id=Faulty-v0",
       "sim.command=[python3, " + SourceDir() +
           "/sim_bridge/python/tests/faulty_env.py, --bind, "
           "'{bind}', --num-envs, '{num_envs}', --fault, crash]"},
      120);
  EXPECT_EQ(code, 1) << fatal;
  EXPECT_NE(fatal.find("no restart left (launch.max_restarts 0 per role)"), std::string::npos)
      << fatal;
}

// rollout.max_staleness 1 with a rollout worker killed mid-run: its rollout is dealt again,
// its replacement sets its envs up again and loads the newest version, and the job finishes
// every iteration within the bound.
TEST(PpoTest, AKilledWorkerOfAStaleRunIsReplaced) {
  std::string root = FreshDir("ppo_stale_kill");
  std::vector<std::string> args = {"run",
                                   CartPole(),
                                   "job.run_root=" + root,
                                   "job.name=r",
                                   "ppo.total_steps=102400",
                                   "rollout.workers=2",
                                   "rollout.max_staleness=1",
                                   "launch.restart_backoff_s=0.1",
                                   "dashboard.enabled=false"};
  JobProcess job(args, root + "/r.txt");
  ASSERT_TRUE(WaitForMetrics(root + "/r", 5, 120)) << job.Output();
  const int pid = StartedPid(job.Output(), "rollout-1");
  ASSERT_GT(pid, 0) << job.Output();
  kill(pid, SIGKILL);
  ASSERT_EQ(job.Wait(300).value_or(-1), 0) << job.Output();
  const std::string events = ReadFile(root + "/r/events.jsonl");
  EXPECT_NE(events.find("\"lost\""), std::string::npos) << events;
  EXPECT_NE(events.find("rollout-1"), std::string::npos) << events;
  auto records = ReadMetricsJsonl(root + "/r");
  ASSERT_EQ(records.size(), 200u) << "102400 steps, 2 workers x 8 envs x 32 steps each";
  for (const auto& r : records) {
    EXPECT_LE(r["metrics"]["version_lag"].get<double>(), 1) << r.dump();
    EXPECT_EQ(r["metrics"]["stale_batches_discarded"].get<double>(), 0) << r.dump();
  }
  EXPECT_EQ(records.back()["metrics"]["env_steps"].get<double>(), 102400) << "no rollout lost";
  EXPECT_GT(records.back()["metrics"]["faults/episodes_cut"].get<double>(), 0) << events;
}

TEST(PpoTest, UnknownEnvFailsWithSuggestion) {
  std::string root = FreshDir("ppo_badenv");
  auto [code, out] = RunJob(root, "e", {"env.id=CartPole-v0"});
  // A config error now (validate checks env ids): exit 2, before any actor starts.
  EXPECT_EQ(code, 2);
  EXPECT_EQ(out.find("started"), std::string::npos) << out;
  EXPECT_NE(out.find("unknown env 'CartPole-v0' (did you mean CartPole-v1?)"), std::string::npos)
      << out;
}

}  // namespace
}  // namespace rlforge::testing
