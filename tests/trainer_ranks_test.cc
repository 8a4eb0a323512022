// End-to-end: a job with trainer.ranks 2 (configs/sft_tiny.yaml) loses one trainer rank
// mid-training, killed or hung, and must stop naming that rank, with every process gone.
//
// job running (both ranks in every step) -> SIGKILL / SIGSTOP trainer-1 -> the controller
//   sees the exit / the missed heartbeats -> shuts the job down -> exit 1 naming trainer-1
#include <gtest/gtest.h>
#include <signal.h>

#include <iostream>
#include <string>
#include <vector>

#include "common/clock.h"
#include "tests/job_process.h"

namespace rlforge::testing {
namespace {

// A job that trains until it is stopped: 2 ranks, no evaluation or checkpoint on the way.
std::vector<std::string> TwoRankJob(const std::string& root, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"run",
                                   SourceDir() + "/configs/sft_tiny.yaml",
                                   "job.run_root=" + root,
                                   "job.name=r",
                                   "trainer.ranks=2",
                                   "sft.steps=1000000",
                                   "sft.eval_every=0",
                                   "sft.save_every=0",
                                   "dashboard.enabled=false"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// Kills what a failed test leaves behind (a stopped rank ignores everything but SIGKILL).
struct KillOnExit {
  std::vector<int> pids;
  ~KillOnExit() {
    for (int pid : pids) {
      if (ProcessExists(pid)) kill(pid, SIGKILL);
    }
  }
};

// Starts the job and waits until both ranks have trained together for two iterations
// (TrainerGroup answers an iteration only when every rank did). Returns every child's pid
// (the ranks and their rendezvous store); trainer-1's into *rank1.
std::vector<int> StartTraining(JobProcess& job, const std::string& root, int* rank1) {
  EXPECT_TRUE(job.WaitForOutput("all 2 actors registered", 60)) << job.Output();
  EXPECT_TRUE(job.WaitForOutput("[sft] iter 2/", 60)) << job.Output();
  const std::string out = job.Output();
  *rank1 = StartedPid(out, "trainer-1");
  EXPECT_GT(*rank1, 0) << out;
  EXPECT_NE(ReadFile(root + "/r/logs/trainer-1.log").find("(rank 1 of 2)"), std::string::npos);
  return ActorPids(out);
}

void ExpectAllGone(const std::vector<int>& pids) {
  for (int pid : pids) EXPECT_FALSE(ProcessExists(pid)) << "pid " << pid << " survived";
}

TEST(TrainerRanksTest, SigkillOfTrainerRankOneStopsTheJobNamingItWithinTenSeconds) {
  const std::string root = FreshDir("ranks_sigkill");
  JobProcess job(TwoRankJob(root), root + "/out.txt");
  int rank1 = 0;
  KillOnExit cleanup{StartTraining(job, root, &rank1)};
  ASSERT_FALSE(HasFailure());
  ASSERT_EQ(cleanup.pids.size(), 3u) << job.Output();  // store, trainer-0, trainer-1
  const Stopwatch timer;
  kill(rank1, SIGKILL);
  const auto code = job.Wait(10);
  const double took = timer.Seconds();
  ASSERT_TRUE(code.has_value()) << "still running 10 s after trainer-1 died\n" << job.Output();
  EXPECT_EQ(*code, 1);
  EXPECT_LT(took, 10.0);
  const std::string out = job.Output();
  EXPECT_NE(out.find("actor trainer-1 (pid " + std::to_string(rank1)), std::string::npos) << out;
  EXPECT_NE(out.find("killed by signal 9"), std::string::npos) << out;
  EXPECT_NE(out.find("logs/trainer-1.log"), std::string::npos) << out;
  ExpectAllGone(cleanup.pids);
  EXPECT_NE(ReadFile(root + "/r/status.json").find("\"failed\""), std::string::npos);
  std::cout << "[ timing ] SIGKILL of trainer-1 -> controller exit: " << took << " s\n";
}

// A hung rank (SIGSTOP: no heartbeats, its peer blocked in a collective) is declared dead
// after heartbeat_interval_ms x heartbeat_misses (1.5 s here); shutdown kills a dead actor
// at once, which frees its peer's collective, so the job stops within the deadline plus
// slack, not after the whole grace sequence.
TEST(TrainerRanksTest, HungTrainerRankStopsTheJobNamingIt) {
  constexpr double kHeartbeatDeadline = 0.5 * 3, kSlack = 2;
  const std::string root = FreshDir("ranks_sigstop");
  JobProcess job(
      TwoRankJob(root, {"controller.heartbeat_interval_ms=500", "controller.heartbeat_misses=3",
                        "controller.shutdown_grace_s=2"}),
      root + "/out.txt");
  int rank1 = 0;
  KillOnExit cleanup{StartTraining(job, root, &rank1)};
  ASSERT_FALSE(HasFailure());
  const Stopwatch timer;
  kill(rank1, SIGSTOP);
  const double bound = kHeartbeatDeadline + kSlack;
  const auto code = job.Wait(bound);
  const double took = timer.Seconds();
  ASSERT_TRUE(code.has_value()) << "still running " << bound << " s after trainer-1 hung\n"
                                << job.Output();
  EXPECT_EQ(*code, 1);
  const std::string out = job.Output();
  EXPECT_NE(out.find("actor trainer-1 (pid " + std::to_string(rank1)), std::string::npos) << out;
  EXPECT_NE(out.find("missed 3 heartbeats"), std::string::npos) << out;
  ExpectAllGone(cleanup.pids);
  std::cout << "[ timing ] SIGSTOP of trainer-1 -> controller exit: " << took << " s\n";
}

}  // namespace
}  // namespace rlforge::testing
