// Whole-job checkpoints and `rlforge run --resume` through the rlforge binary: a job killed
// (SIGKILL of the controller) or interrupted (SIGINT) and then resumed writes the same
// metrics.jsonl as one that ran through, every metric of every step; a torn checkpoint is
// skipped with a message naming it; the actors of a killed controller do not outlive it.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <regex>
#include <thread>

#include "nlohmann/json.hpp"
#include "tests/job_process.h"

namespace rlforge::testing {
namespace {

namespace fs = std::filesystem;

std::string Manifest(const std::string& run_dir, int step) {
  return run_dir + "/checkpoints/step_" + std::to_string(step) + "/state/manifest.json";
}

bool WaitForFile(const std::string& path, double timeout_s) {
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < until) {
    if (fs::exists(path)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

// Each record's step and metrics: everything but the timings.
std::vector<nlohmann::json> Metrics(const std::string& run_dir) {
  std::vector<nlohmann::json> out;
  for (const auto& r : ReadMetricsJsonl(run_dir)) out.push_back({r["step"], r["metrics"]});
  return out;
}

// The steps of the complete checkpoints left in a run directory.
std::vector<int> CheckpointSteps(const std::string& run_dir) {
  std::vector<int> steps;
  for (const auto& e : fs::directory_iterator(run_dir + "/checkpoints")) {
    if (fs::exists(e.path() / "state" / "manifest.json")) {
      steps.push_back(std::stoi(e.path().filename().string().substr(5)));
    }
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

void ExpectSameRun(const std::vector<nlohmann::json>& want, const std::vector<nlohmann::json>& got,
                   const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(got[i], want[i]) << what << ": record " << i;
  }
}

// Starts `args` and, once the checkpoint of `step` is complete, sends `sig` to the controller.
// Returns the exit code and the output.
std::pair<int, std::string> RunAndSignal(const std::vector<std::string>& args,
                                         const std::string& run_dir, int step, int sig,
                                         const std::string& out_path) {
  JobProcess job(args, out_path);
  EXPECT_TRUE(WaitForFile(Manifest(run_dir, step), 120)) << job.Output();
  job.Signal(sig);
  auto code = job.Wait(60);
  return {code.value_or(-1), job.Output()};
}

// The actors a controller started are gone within `timeout_s` after it died.
void ExpectNoOrphans(const std::vector<int>& pids, double timeout_s) {
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (int pid : pids) {
    while (ProcessExists(pid) && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_FALSE(ProcessExists(pid)) << "actor pid " << pid << " outlived its controller";
  }
}

std::vector<std::string> PpoArgs(const std::string& root, const std::string& name) {
  // 100 iterations of 256 env steps: a few seconds, long enough to be killed in the middle.
  return {"run",
          SourceDir() + "/configs/ppo_cartpole.yaml",
          "job.run_root=" + root,
          "job.name=" + name,
          "ppo.total_steps=25600",
          "ppo.epochs=4",
          "checkpoint.every=10",
          "checkpoint.keep=2",
          "dashboard.enabled=false"};
}

TEST(ResumeTest, PpoCartpoleKilledAndResumedWritesTheSameMetrics) {
  const std::string root = FreshDir("resume_ppo_kill");
  auto [code, out] = RunRlforge(PpoArgs(root, "full"), 300);
  ASSERT_EQ(code, 0) << out;
  const auto full = Metrics(root + "/full");
  ASSERT_EQ(full.size(), 100u);
  EXPECT_EQ(CheckpointSteps(root + "/full"), (std::vector<int>{90, 100}));  // checkpoint.keep

  const std::string run = root + "/killed";
  auto [killed, kout] = RunAndSignal(PpoArgs(root, "killed"), run, 20, SIGKILL, root + "/k.txt");
  ASSERT_EQ(killed, 128 + SIGKILL) << kout;
  ASSERT_LT(Metrics(run).size(), 100u) << "the job ended before it was killed";
  ExpectNoOrphans(ActorPids(kout), 5);

  auto [rc, rout] = RunRlforge({"run", "--resume", run}, 300);
  ASSERT_EQ(rc, 0) << rout;
  EXPECT_NE(rout.find("resuming from checkpoint"), std::string::npos) << rout;
  ExpectSameRun(full, Metrics(run), "killed and resumed");
}

// The pid the controller reported for `actor` ("started trainer-0 (pid 123)"), 0 if none.
int PidOf(const std::string& output, const std::string& actor) {
  std::smatch m;
  if (!std::regex_search(output, m, std::regex("started " + actor + " \\(pid (\\d+)\\)"))) {
    return 0;
  }
  return std::stoi(m[1]);
}

// launch.max_job_restarts: a trainer that dies mid-run (it cannot be replaced on its own)
// restarts the whole job from the newest checkpoint, in the same run, with the same result.
TEST(ResumeTest, PpoCartpoleWhoseTrainerDiesRestartsFromItsCheckpointByItself) {
  const std::string root = FreshDir("resume_ppo_trainer_lost");
  auto [code, out] = RunRlforge(PpoArgs(root, "full"), 300);
  ASSERT_EQ(code, 0) << out;
  const auto full = Metrics(root + "/full");

  const std::string run = root + "/restarted";
  std::vector<std::string> args = PpoArgs(root, "restarted");
  args.push_back("launch.max_job_restarts=1");
  JobProcess job(args, root + "/r.txt");
  ASSERT_TRUE(WaitForFile(Manifest(run, 20), 120)) << job.Output();
  const int trainer = PidOf(job.Output(), "trainer-0");
  ASSERT_GT(trainer, 0) << job.Output();
  kill(trainer, SIGKILL);
  auto rc = job.Wait(300);
  ASSERT_EQ(rc.value_or(-1), 0) << job.Output();
  const std::string log = job.Output();
  EXPECT_NE(log.find("job restart 1 of 1"), std::string::npos) << log;
  EXPECT_NE(log.find("resuming from checkpoint"), std::string::npos) << log;
  EXPECT_NE(ReadFile(run + "/events.jsonl").find("\"job_restart\""), std::string::npos);
  ExpectSameRun(full, Metrics(run), "restarted after its trainer died");
}

TEST(ResumeTest, ATrainerLossStopsTheJobWhenNoJobRestartIsAllowed) {
  const std::string root = FreshDir("resume_ppo_trainer_fatal");
  JobProcess job(PpoArgs(root, "run"), root + "/r.txt");
  ASSERT_TRUE(WaitForFile(Manifest(root + "/run", 10), 120)) << job.Output();
  const int trainer = PidOf(job.Output(), "trainer-0");
  ASSERT_GT(trainer, 0) << job.Output();
  kill(trainer, SIGKILL);
  auto rc = job.Wait(120);
  EXPECT_EQ(rc.value_or(-1), 1) << job.Output();
  EXPECT_EQ(job.Output().find("job restart"), std::string::npos) << job.Output();
}

TEST(ResumeTest, PpoCartpoleOnSimServersInterruptedAndResumedWritesTheSameMetrics) {
  const std::string root = FreshDir("resume_ppo_sigint");
  std::vector<std::string> full_args = PpoArgs(root, "full");
  full_args.push_back("sim.backend=server");
  full_args.push_back("sim.servers_per_worker=2");
  auto [code, out] = RunRlforge(full_args, 300);
  ASSERT_EQ(code, 0) << out;
  const auto full = Metrics(root + "/full");

  const std::string run = root + "/stopped";
  std::vector<std::string> args = PpoArgs(root, "stopped");
  args.push_back("sim.backend=server");
  args.push_back("sim.servers_per_worker=2");
  auto [stopped, sout] = RunAndSignal(args, run, 10, SIGINT, root + "/s.txt");
  ASSERT_EQ(stopped, 128 + SIGINT) << sout;
  // The first Ctrl-C lets the iteration under way finish and checkpoints it.
  const auto partial = Metrics(run);
  ASSERT_LT(partial.size(), 100u) << "the job ended before it was interrupted";
  const int last = partial.back()[0].get<int>();
  EXPECT_TRUE(fs::exists(Manifest(run, last))) << sout;
  EXPECT_NE(sout.find("rlforge run --resume"), std::string::npos) << sout;

  auto [rc, rout] = RunRlforge({"run", "--resume", run}, 300);
  ASSERT_EQ(rc, 0) << rout;
  EXPECT_NE(rout.find("step_" + std::to_string(last) + "/state (iteration"), std::string::npos)
      << rout;
  ExpectSameRun(full, Metrics(run), "interrupted and resumed");
}

TEST(ResumeTest, TornCheckpointIsSkippedWithAMessageAndThePreviousOneUsed) {
  const std::string root = FreshDir("resume_torn");
  std::vector<std::string> args = PpoArgs(root, "run");
  args.push_back("checkpoint.keep=3");
  auto [code, out] = RunRlforge(args, 300);
  ASSERT_EQ(code, 0) << out;
  const std::string run = root + "/run";
  const auto full = Metrics(run);
  ASSERT_EQ(CheckpointSteps(run), (std::vector<int>{80, 90, 100}));
  // Killed while writing step 100: its files are there, its manifest is not.
  fs::remove(Manifest(run, 100));

  auto [rc, rout] = RunRlforge({"run", "--resume", run}, 300);
  ASSERT_EQ(rc, 0) << rout;
  EXPECT_NE(rout.find("checkpoints/step_100/state is incomplete"), std::string::npos) << rout;
  EXPECT_NE(rout.find("resuming from checkpoint " + run + "/checkpoints/step_90/state"),
            std::string::npos)
      << rout;
  ExpectSameRun(full, Metrics(run), "resumed from the checkpoint before the torn one");
  EXPECT_EQ(CheckpointSteps(run), (std::vector<int>{80, 90, 100}));
}

TEST(ResumeTest, ResumeRefusesADirectoryThatIsNotARun) {
  const std::string root = FreshDir("resume_bad");
  auto [rc, out] = RunRlforge({"run", "--resume", root + "/nothing"}, 60);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("not a run directory"), std::string::npos) << out;
  auto [rc2, out2] = RunRlforge({"run", "--resume", root, "job.seed=2"}, 60);
  EXPECT_EQ(rc2, 2) << out2;
  EXPECT_NE(out2.find("takes no job file or overrides"), std::string::npos) << out2;
}

// The seconds-long SFT stage the language-model jobs start from: its final export.
std::string SftBase(const std::string& root) {
  auto [rc, out] =
      RunRlforge({"run", SourceDir() + "/configs/sft_tiny.yaml", "job.run_root=" + root,
                  "job.name=sft", "sft.steps=4", "sft.eval_every=0", "sft.save_every=0"},
                 300);
  EXPECT_EQ(rc, 0) << out;
  return root + "/sft/checkpoints/step_4";
}

// Runs `make(name)` through as "full", then as "killed": SIGKILL of the controller once step
// `step`'s checkpoint is complete, and `--resume`; the two metrics.jsonl must be the same.
// Returns the full run's metrics.
std::vector<nlohmann::json> ExpectKilledAndResumedRunsTheSame(
    const std::string& root,
    const std::function<std::vector<std::string>(const std::string&)>& make, int step) {
  auto [code, out] = RunRlforge(make("full"), 300);
  EXPECT_EQ(code, 0) << out;
  const auto full = Metrics(root + "/full");
  const std::string run = root + "/killed";
  auto [killed, kout] = RunAndSignal(make("killed"), run, step, SIGKILL, root + "/killed.txt");
  EXPECT_EQ(killed, 128 + SIGKILL) << kout;
  EXPECT_LT(Metrics(run).size(), full.size()) << "the job ended before it was killed";
  ExpectNoOrphans(ActorPids(kout), 5);
  auto [rc, rout] = RunRlforge({"run", "--resume", run}, 300);
  EXPECT_EQ(rc, 0) << rout;
  EXPECT_NE(rout.find("resuming from checkpoint"), std::string::npos) << rout;
  ExpectSameRun(full, Metrics(run), "killed and resumed");
  return full;
}

// configs/grpo_arith.yaml, shortened, from the seconds-long SFT stage, with a length reward
// so that every iteration updates the policy (as grpo_test.cc's fleet test).
std::vector<std::string> GrpoArgs(const std::string& root, const std::string& base,
                                  const std::string& name) {
  return {"run",
          WithLengthReward(SourceDir() + "/configs/grpo_arith.yaml", root + "/grpo_length.yaml"),
          "job.run_root=" + root,
          "job.name=" + name,
          "model.path=" + base,
          "job.iterations=10",
          "grpo.prompts_per_iteration=4",
          "grpo.eval_every=5",
          "grpo.eval_examples=8",
          "trainer.lr=1e-3",
          "checkpoint.every=2",
          "dashboard.enabled=false"};
}

TEST(ResumeTest, GrpoArithKilledOrInterruptedAndResumedWritesTheSameMetrics) {
  const std::string root = FreshDir("resume_grpo");
  const std::string base = SftBase(root);

  auto [code, out] = RunRlforge(GrpoArgs(root, base, "full"), 300);
  ASSERT_EQ(code, 0) << out;
  const auto full = Metrics(root + "/full");
  ASSERT_EQ(full.size(), 11u);  // step 0 (the start's evaluation) and 10 iterations
  // The policy moved: the checkpoints hold optimizer state that matters.
  EXPECT_GE(full.back()[1]["policy_version"].get<double>(), 5) << out;

  for (int sig : {SIGKILL, SIGINT}) {
    const std::string name = sig == SIGKILL ? "killed" : "stopped";
    const std::string run = root + "/" + name;
    auto [rc, sout] =
        RunAndSignal(GrpoArgs(root, base, name), run, 2, sig, root + "/" + name + ".txt");
    ASSERT_EQ(rc, 128 + sig) << sout;
    ASSERT_LT(Metrics(run).size(), 11u) << "the job ended before the signal";
    if (sig == SIGKILL) ExpectNoOrphans(ActorPids(sout), 5);
    auto [rrc, rout] = RunRlforge({"run", "--resume", run}, 300);
    ASSERT_EQ(rrc, 0) << rout;
    ExpectSameRun(full, Metrics(run), name + " and resumed");
  }
}

// lm_ppo (configs/ppo_arith.yaml, shortened, with a length reward): the critic's shards and
// AdamW moments are part of the checkpoint. The critic trains alone in iteration 1, so by the
// cut at step 2 it has moved apart from the policy, and the held-out evaluations at steps 3
// and 6 come after the resume.
TEST(ResumeTest, LmPpoArithKilledAndResumedWritesTheSameMetrics) {
  const std::string root = FreshDir("resume_lm_ppo");
  const std::string base = SftBase(root);
  const std::string config =
      WithLengthReward(SourceDir() + "/configs/ppo_arith.yaml", root + "/ppo_length.yaml");
  const auto args = [&](const std::string& name) {
    return std::vector<std::string>{"run",
                                    config,
                                    "job.run_root=" + root,
                                    "job.name=" + name,
                                    "model.path=" + base,
                                    "job.iterations=6",
                                    "grpo.prompts_per_iteration=8",
                                    "grpo.group_size=2",
                                    "grpo.eval_every=3",
                                    "grpo.eval_examples=8",
                                    "grpo.kl_beta=0.05",
                                    "critic.warmup_iterations=1",
                                    "trainer.lr=1e-3",
                                    "checkpoint.every=2",
                                    "dashboard.enabled=false"};
  };
  const auto full = ExpectKilledAndResumedRunsTheSame(root, args, 2);
  ASSERT_EQ(full.size(), 7u);
  EXPECT_GE(full.back()[1]["policy_version"].get<double>(), 4);
  EXPECT_TRUE(full.back()[1].contains("value_loss"));
  EXPECT_TRUE(fs::exists(root + "/killed/checkpoints/step_6/state/trainer/critic/manifest.json"));
}

// dpo (configs/dpo_arith.yaml, shortened) on 2 trainer ranks: each rank's shards of the
// policy and its AdamW state; the frozen reference is model.path again. The cut at step 2
// falls between two evaluations.
TEST(ResumeTest, DpoArithKilledAndResumedWritesTheSameMetrics) {
  const std::string root = FreshDir("resume_dpo");
  const std::string base = SftBase(root);
  const auto args = [&](const std::string& name) {
    return std::vector<std::string>{"run",
                                    SourceDir() + "/configs/dpo_arith.yaml",
                                    "job.run_root=" + root,
                                    "job.name=" + name,
                                    "model.path=" + base,
                                    "job.iterations=6",
                                    "dpo.pairs_per_iteration=8",
                                    "dpo.eval_every=3",
                                    "dpo.eval_examples=8",
                                    "trainer.lr=1e-3",
                                    "trainer.ranks=2",
                                    "checkpoint.every=2",
                                    "dashboard.enabled=false"};
  };
  const auto full = ExpectKilledAndResumedRunsTheSame(root, args, 2);
  ASSERT_EQ(full.size(), 7u);
  EXPECT_EQ(full.back()[1]["policy_version"].get<double>(), 6);
  EXPECT_NE(full.back()[1]["dpo/margin"].get<double>(), 0.0);
  const std::string trainer = root + "/killed/checkpoints/step_6/state/trainer/";
  EXPECT_TRUE(fs::exists(trainer + "rank-0-of-2.safetensors"));
  EXPECT_TRUE(fs::exists(trainer + "rank-1-of-2.safetensors"));
}

// configs/sft_tiny.yaml over 8 iterations of 4 steps, past two epochs of its data: the
// model, AdamW, the schedule's step and the data position. Killed (SIGKILL) and, separately,
// interrupted (SIGINT) after step 2's checkpoint (mid-epoch), each resumed to the same
// metrics.jsonl and the same final Hugging Face export, byte for byte.
TEST(ResumeTest, SftKilledOrInterruptedAndResumedWritesTheSameMetrics) {
  const std::string root = FreshDir("resume_sft");
  const auto args = [&](const std::string& name) {
    return std::vector<std::string>{"run",
                                    SourceDir() + "/configs/sft_tiny.yaml",
                                    "job.run_root=" + root,
                                    "job.name=" + name,
                                    "sft.steps=32",
                                    "sft.eval_every=8",
                                    "sft.save_every=8",
                                    "checkpoint.every=2",
                                    "checkpoint.keep=2",
                                    "dashboard.enabled=false"};
  };
  const auto full = ExpectKilledAndResumedRunsTheSame(root, args, 2);
  ASSERT_EQ(full.size(), 8u);
  EXPECT_GE(full.back()[1]["epoch"].get<double>(), 2) << "the run stayed in its first epochs";
  EXPECT_EQ(CheckpointSteps(root + "/full"), (std::vector<int>{6, 8}));
  const std::string last = "/checkpoints/step_32/model.safetensors";
  EXPECT_EQ(ReadFile(root + "/killed" + last), ReadFile(root + "/full" + last));

  const std::string run = root + "/stopped";
  auto [stopped, sout] = RunAndSignal(args("stopped"), run, 2, SIGINT, root + "/stopped.txt");
  ASSERT_EQ(stopped, 128 + SIGINT) << sout;
  const auto partial = Metrics(run);
  ASSERT_LT(partial.size(), full.size()) << "the job ended before it was interrupted";
  // The first Ctrl-C lets the iteration under way finish and checkpoints it.
  const int at = partial.back()[0].get<int>();
  EXPECT_TRUE(fs::exists(Manifest(run, at))) << sout;
  EXPECT_NE(sout.find("rlforge run --resume"), std::string::npos) << sout;
  auto [rc, rout] = RunRlforge({"run", "--resume", run}, 300);
  ASSERT_EQ(rc, 0) << rout;
  EXPECT_NE(rout.find("step_" + std::to_string(at) + "/state (iteration"), std::string::npos)
      << rout;
  ExpectSameRun(full, Metrics(run), "interrupted and resumed");
  EXPECT_EQ(ReadFile(run + last), ReadFile(root + "/full" + last));
}

// launch.max_job_restarts with 2 sft ranks: trainer rank 1 SIGKILLed after step 2's
// checkpoint restarts the whole job from it in the same run directory (its trainer store
// anew) and the run ends with the metrics of one that was not touched.
TEST(ResumeTest, SftOnTwoRanksWhoseRankDiesRestartsFromItsCheckpointByItself) {
  const std::string root = FreshDir("resume_sft_restart");
  const auto args = [&](const std::string& name) {
    return std::vector<std::string>{"run",
                                    SourceDir() + "/configs/sft_tiny.yaml",
                                    "job.run_root=" + root,
                                    "job.name=" + name,
                                    "sft.steps=32",
                                    "trainer.ranks=2",
                                    "checkpoint.every=2",
                                    "launch.max_job_restarts=1",
                                    "dashboard.enabled=false"};
  };
  auto [code, out] = RunRlforge(args("full"), 300);
  ASSERT_EQ(code, 0) << out;
  const auto full = Metrics(root + "/full");
  ASSERT_EQ(full.size(), 8u);

  const std::string run = root + "/restarted";
  JobProcess job(args("restarted"), root + "/r.txt");
  ASSERT_TRUE(WaitForFile(Manifest(run, 2), 120)) << job.Output();
  const int rank1 = PidOf(job.Output(), "trainer-1");
  ASSERT_GT(rank1, 0) << job.Output();
  kill(rank1, SIGKILL);
  auto rc = job.Wait(300);
  ASSERT_EQ(rc.value_or(-1), 0) << job.Output();
  EXPECT_NE(job.Output().find("job restart 1 of 1"), std::string::npos) << job.Output();
  ExpectSameRun(full, Metrics(run), "restarted after trainer rank 1 died");
}

}  // namespace
}  // namespace rlforge::testing
