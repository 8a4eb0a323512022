#include "launch/process_launcher.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace rlforge {
namespace {

std::string TempLog(const std::string& name) {
  auto dir =
      std::filesystem::temp_directory_path() / ("rlforge_launch_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

// Whether any live (non-zombie) process is in group `pgid`. Zombies do not
// count: reaping orphans is init's job, and not every container's init does it.
bool GroupHasLiveMembers(int pgid) {
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "stat");
    std::string stat;
    std::getline(in, stat);
    size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    char state;
    int ppid, pgrp;
    rest >> state >> ppid >> pgrp;
    if (pgrp == pgid && state != 'Z') return true;
  }
  return false;
}

std::vector<ProcessExit> WaitForExit(LocalProcessLauncher& l, int expected) {
  std::vector<ProcessExit> all;
  for (int i = 0; i < 500 && static_cast<int>(all.size()) < expected; ++i) {
    for (auto& e : l.Reap()) all.push_back(e);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return all;
}

TEST(LocalProcessLauncherTest, CapturesOutputAndExitCode) {
  LocalProcessLauncher l;
  std::string log = TempLog("a.log");
  std::filesystem::remove(log);
  auto pid = l.Start({"a", {"/bin/sh", "-c", "echo hello; echo oops >&2; exit 3"}, log, {}, {}});
  ASSERT_TRUE(pid.ok()) << pid.status();
  auto exits = WaitForExit(l, 1);
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].name, "a");
  EXPECT_EQ(exits[0].Describe(), "exited with code 3");
  std::string tail = TailOfFile(log, 5);
  EXPECT_NE(tail.find("hello"), std::string::npos);
  EXPECT_NE(tail.find("oops"), std::string::npos);
}

TEST(LocalProcessLauncherTest, PassesEnvironment) {
  LocalProcessLauncher l;
  std::string log = TempLog("env.log");
  std::filesystem::remove(log);
  ASSERT_TRUE(
      l.Start({"e", {"/bin/sh", "-c", "echo v=$RLFORGE_X"}, log, {{"RLFORGE_X", "42"}}, {}}).ok());
  WaitForExit(l, 1);
  EXPECT_NE(TailOfFile(log, 2).find("v=42"), std::string::npos);
}

TEST(LocalProcessLauncherTest, PinsTheChildToItsCpus) {
  LocalProcessLauncher l;
  std::string log = TempLog("cpus.log");
  std::filesystem::remove(log);
  cpu_set_t mine;
  ASSERT_EQ(sched_getaffinity(0, sizeof mine, &mine), 0);
  int last = 0;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &mine)) last = c;
  }
  ProcessSpec spec{"p", {"/bin/grep", "Cpus_allowed_list", "/proc/self/status"}, log, {}, {}};
  spec.cpus = {last};
  ASSERT_TRUE(l.Start(spec).ok());
  WaitForExit(l, 1);
  EXPECT_NE(TailOfFile(log, 2).find("Cpus_allowed_list:\t" + std::to_string(last) + "\n"),
            std::string::npos)
      << TailOfFile(log, 2);
  // A cpu outside the machine's set is an error naming the process and the cpus.
  spec.cpus = {CPU_SETSIZE - 1};
  auto bad = l.Start(spec);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("cannot start p: pinning to cpus " +
                                        std::to_string(CPU_SETSIZE - 1)),
            std::string::npos)
      << bad.status();
}

TEST(LocalProcessLauncherTest, ExecFailureIsAnErrorNamingTheProgram) {
  LocalProcessLauncher l;
  auto pid = l.Start({"b", {"/nonexistent/prog"}, TempLog("b.log"), {}, {}});
  ASSERT_FALSE(pid.ok());
  EXPECT_NE(pid.status().message().find("/nonexistent/prog"), std::string::npos);
  EXPECT_TRUE(l.Running().empty());
}

TEST(LocalProcessLauncherTest, SignalReachesTheProcessGroup) {
  LocalProcessLauncher l;
  // The shell's child sleep is in the same group and must die with it.
  auto pid = l.Start({"c", {"/bin/sh", "-c", "sleep 30 & wait"}, TempLog("c.log"), {}, {}});
  ASSERT_TRUE(pid.ok());
  l.Signal(*pid, SIGTERM);
  auto exits = WaitForExit(l, 1);
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_TRUE(exits[0].signaled);
  EXPECT_EQ(exits[0].code, SIGTERM);
  bool alive = true;
  for (int i = 0; i < 200 && alive; ++i) {
    alive = GroupHasLiveMembers(*pid);
    if (alive) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_FALSE(alive) << "process group still has live members";
}

TEST(LocalProcessLauncherTest, DestructorLeavesNoOrphans) {
  int pid = 0;
  {
    LocalProcessLauncher l;
    auto p = l.Start({"d", {"/bin/sleep", "30"}, TempLog("d.log"), {}, {}});
    ASSERT_TRUE(p.ok());
    pid = *p;
  }
  EXPECT_NE(kill(pid, 0), 0) << "child survived its launcher";
}

}  // namespace
}  // namespace rlforge
