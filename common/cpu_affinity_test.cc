#include "common/cpu_affinity.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <thread>

namespace rlforge {
namespace {

TEST(CpuAffinityTest, FormatsRuns) {
  EXPECT_EQ(FormatCpuList({}), "");
  EXPECT_EQ(FormatCpuList({3}), "3");
  EXPECT_EQ(FormatCpuList({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
}

TEST(CpuAffinityTest, TwoCoresOneWorkerTwoServers) {
  SimPlacement p = PlanSimPlacement({0, 1}, 1, 2);
  ASSERT_TRUE(p.pinned) << p.why;
  EXPECT_EQ(p.worker_cpus, (std::vector<std::vector<int>>{{0}}));
  EXPECT_EQ(p.server_cpus, (std::vector<std::vector<int>>{{1}, {1}}));
  EXPECT_EQ(p.why, "workers on cpus 0 (one each), their 2 server(s) on cpus 1");
}

TEST(CpuAffinityTest, ServersNeverShareAWorkersCoreAndUseEveryOtherCore) {
  // A cpuset with holes, as Slurm or taskset may give.
  std::vector<int> allowed = {2, 3, 5, 6, 7, 9};
  SimPlacement p = PlanSimPlacement(allowed, 2, 3);
  ASSERT_TRUE(p.pinned);
  EXPECT_EQ(p.worker_cpus, (std::vector<std::vector<int>>{{2}, {3}}));
  ASSERT_EQ(p.server_cpus.size(), 6u);
  EXPECT_EQ(p.server_cpus, (std::vector<std::vector<int>>{{5}, {6}, {7}, {9}, {5}, {6}}));
  // Fewer servers than free cores: each its own, the rest unused.
  SimPlacement q = PlanSimPlacement(allowed, 1, 2);
  EXPECT_EQ(q.server_cpus, (std::vector<std::vector<int>>{{3}, {5}}));
  EXPECT_EQ(q.why, "workers on cpus 2 (one each), their 2 server(s) on cpus 3,5");
}

TEST(CpuAffinityTest, NothingPinnedWithoutACoreForServers) {
  EXPECT_FALSE(PlanSimPlacement({0}, 1, 2).pinned);
  SimPlacement p = PlanSimPlacement({0, 1}, 2, 1);
  EXPECT_FALSE(p.pinned);
  EXPECT_TRUE(p.worker_cpus.empty());
  EXPECT_TRUE(p.server_cpus.empty());
  EXPECT_EQ(p.why, "not pinned: 2 cpu(s) for 2 worker(s) leave none for their servers");
}

std::vector<int> CpusOf(pid_t tid) {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(tid, sizeof(set), &set), 0);
  std::vector<int> out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) out.push_back(c);
  }
  return out;
}

TEST(CpuAffinityTest, PinProcessReachesThreadsStartedBefore) {
  auto allowed = AllowedCpus();
  ASSERT_TRUE(allowed.ok()) << allowed.status();
  ASSERT_FALSE(allowed->empty());
  std::atomic<pid_t> tid{0};
  std::atomic<bool> done{false};
  std::thread t([&] {
    tid = static_cast<pid_t>(syscall(SYS_gettid));
    while (!done) std::this_thread::yield();
  });
  while (tid == 0) std::this_thread::yield();
  std::vector<int> one = {allowed->back()};
  ASSERT_TRUE(PinProcess(one).ok());
  EXPECT_EQ(CpusOf(0), one);
  EXPECT_EQ(CpusOf(tid), one);
  done = true;
  t.join();
  EXPECT_FALSE(PinProcess({-1}).ok());
  ASSERT_TRUE(PinProcess(*allowed).ok());  // as it was, for the tests after this one
  EXPECT_EQ(CpusOf(0), *allowed);
}

}  // namespace
}  // namespace rlforge
