// End-to-end: real `rlforge run` jobs with real actor processes over ZeroMQ.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "common/clock.h"
#include "nlohmann/json.hpp"
#include "tests/job_process.h"

namespace rlforge::testing {
namespace {

namespace fs = std::filesystem;

std::string EchoConfig() { return SourceDir() + "/configs/echo.yaml"; }

void ExpectAllGone(const std::vector<int>& pids) {
  for (int pid : pids) EXPECT_FALSE(ProcessExists(pid)) << "actor pid " << pid << " survived";
}

TEST(JobTest, EchoJobRoundTripsTensorsAndShutsDownCleanly) {
  std::string root = FreshDir("echo_ok");
  auto [code, out] =
      RunRlforge({"run", EchoConfig(), "job.run_root=" + root, "job.name=e", "job.iterations=4",
                  "echo.requests_per_iteration=2", "echo.payload_bytes=4096", "echo.tensors=3"});
  ASSERT_EQ(code, 0) << out;
  std::vector<int> pids = ActorPids(out);
  ASSERT_EQ(pids.size(), 2u) << out;
  ExpectAllGone(pids);
  std::string dir = root + "/e";
  EXPECT_TRUE(fs::exists(dir + "/config.resolved.yaml"));
  EXPECT_TRUE(fs::exists(dir + "/logs/echo-0.log"));
  EXPECT_TRUE(fs::exists(dir + "/logs/echo-1.log"));
  EXPECT_TRUE(fs::exists(dir + "/logs/controller.log"));
  EXPECT_NE(ReadFile(dir + "/logs/echo-1.log").find("registered as echo-1"), std::string::npos);
  auto metrics = ReadMetricsJsonl(dir);
  ASSERT_EQ(metrics.size(), 4u);
  double trips = 0;
  for (size_t i = 0; i < metrics.size(); ++i) {
    EXPECT_EQ(metrics[i]["step"], i + 1);
    trips += metrics[i]["metrics"]["round_trips"].get<double>();
    EXPECT_DOUBLE_EQ(metrics[i]["metrics"]["bytes_verified"].get<double>(), 2 * 2 * 3 * 4096.0);
    EXPECT_TRUE(metrics[i]["timings"].contains("rtt_p50_ms"));
  }
  EXPECT_EQ(trips, 16) << "2 actors x 2 requests x 4 iterations, every byte compared";
  // One progress line per iteration on the console.
  EXPECT_NE(out.find("[echo] iter 4/4"), std::string::npos) << out;
  EXPECT_NE(ReadFile(dir + "/status.json").find("\"finished\""), std::string::npos);
}

TEST(JobTest, ResolvedConfigIsARunnableJobFile) {
  std::string root = FreshDir("resolved");
  auto [code, out] = RunRlforge({"run", EchoConfig(), "job.run_root=" + root, "job.name=a",
                                 "job.iterations=1", "echo.workers=1"});
  ASSERT_EQ(code, 0) << out;
  std::string resolved = root + "/a/config.resolved.yaml";
  EXPECT_NE(ReadFile(resolved).find("workers: 1"), std::string::npos);
  auto [vcode, vout] = RunRlforge({"validate", resolved});
  EXPECT_EQ(vcode, 0) << vout;
}

TEST(JobTest, SecondRunWithSameNameGetsItsOwnDirectory) {
  std::string root = FreshDir("twice");
  for (int i = 0; i < 2; ++i) {
    auto [code, out] = RunRlforge({"run", EchoConfig(), "job.run_root=" + root, "job.name=n",
                                   "job.iterations=1", "echo.workers=1"});
    ASSERT_EQ(code, 0) << out;
  }
  EXPECT_TRUE(fs::exists(root + "/n/metrics.jsonl"));
  EXPECT_TRUE(fs::exists(root + "/n-2/metrics.jsonl"));
}

TEST(JobTest, SigkillOfAnActorStopsTheJobNamingItWithinFiveSeconds) {
  std::string root = FreshDir("sigkill");
  JobProcess job({"run", EchoConfig(), "job.run_root=" + root, "job.name=k",
                  "job.iterations=100000", "echo.work_micros=20000", "echo.payload_bytes=64"},
                 root + "/out.txt");
  ASSERT_TRUE(job.WaitForOutput("all 2 actors registered", 30)) << job.Output();
  ASSERT_TRUE(job.WaitForOutput("iter 2/", 30)) << job.Output();
  std::vector<int> pids = ActorPids(job.Output());
  ASSERT_EQ(pids.size(), 2u);
  const Stopwatch timer;
  kill(pids[1], SIGKILL);
  auto code = job.Wait(10);
  const double took = timer.Seconds();
  ASSERT_TRUE(code.has_value()) << "controller hung after an actor died\n" << job.Output();
  EXPECT_EQ(*code, 1);
  EXPECT_LT(took, 5.0);
  std::string out = job.Output();
  EXPECT_NE(out.find("actor echo-1 (pid " + std::to_string(pids[1])), std::string::npos) << out;
  EXPECT_NE(out.find("killed by signal 9"), std::string::npos) << out;
  EXPECT_NE(out.find("logs/echo-1.log"), std::string::npos) << out;
  ExpectAllGone(pids);
  EXPECT_NE(ReadFile(root + "/k/status.json").find("\"failed\""), std::string::npos);
}

TEST(JobTest, SigintEndsEveryChildAndKeepsTheRunDirectory) {
  for (int sig : {SIGINT, SIGTERM}) {
    std::string root = FreshDir("sigint" + std::to_string(sig));
    JobProcess job({"run", EchoConfig(), "job.run_root=" + root, "job.name=i",
                    "job.iterations=100000", "echo.work_micros=10000", "echo.payload_bytes=64"},
                   root + "/out.txt");
    ASSERT_TRUE(job.WaitForOutput("iter 3/", 30)) << job.Output();
    std::vector<int> pids = ActorPids(job.Output());
    ASSERT_EQ(pids.size(), 2u);
    job.Signal(sig);
    auto code = job.Wait(15);
    ASSERT_TRUE(code.has_value()) << job.Output();
    EXPECT_EQ(*code, 128 + sig);
    ExpectAllGone(pids);
    std::string dir = root + "/i";
    EXPECT_NE(ReadFile(dir + "/status.json").find("\"interrupted\""), std::string::npos);
    auto metrics = ReadMetricsJsonl(dir);  // every line still parses
    EXPECT_GE(metrics.size(), 3u);
    EXPECT_NE(ReadFile(dir + "/logs/echo-0.log").find("shutdown requested"), std::string::npos);
  }
}

TEST(JobTest, ExternalActorsJoinByAddress) {
  std::string root = FreshDir("external");
  JobProcess job({"run", EchoConfig(), "job.run_root=" + root, "job.name=x", "job.iterations=3",
                  "echo.external=true", "echo.payload_bytes=1000"},
                 root + "/out.txt");
  ASSERT_TRUE(job.WaitForOutput("waiting for echo-1 to join", 30)) << job.Output();
  std::smatch m;
  std::string out = job.Output();
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(--connect (tcp://[0-9.]+:[0-9]+))")));
  std::string addr = m[1];
  JobProcess a({"actor", "--role", "echo", "--connect", addr}, root + "/a.txt");
  JobProcess b({"actor", "--role", "echo", "--connect", addr}, root + "/b.txt");
  auto code = job.Wait(30);
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 0) << job.Output();
  EXPECT_EQ(a.Wait(10), 0) << a.Output();
  EXPECT_EQ(b.Wait(10), 0) << b.Output();
  EXPECT_EQ(ReadMetricsJsonl(root + "/x").size(), 3u);
}

// An actor on another host does not die with the controller (no PDEATHSIG there): it notices
// the controller's connection close and exits by itself, in seconds.
TEST(JobTest, AnActorJoinedByHandExitsSoonAfterItsControllerIsKilled) {
  std::string root = FreshDir("orphan");
  JobProcess job(
      {"run", EchoConfig(), "job.run_root=" + root, "job.name=o", "job.iterations=1000000",
       "echo.external=true", "echo.workers=1", "echo.work_micros=1000"},
      root + "/out.txt");
  ASSERT_TRUE(job.WaitForOutput("waiting for echo-0 to join", 30)) << job.Output();
  std::smatch m;
  std::string out = job.Output();
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(--connect (tcp://[0-9.]+:[0-9]+))")));
  JobProcess actor({"actor", "--role", "echo", "--connect", m[1]}, root + "/a.txt");
  ASSERT_TRUE(job.WaitForOutput("running echo", 30)) << job.Output();
  job.Signal(SIGKILL);
  ASSERT_EQ(job.Wait(10), 128 + SIGKILL);
  // Bounded well above what either way out takes, not a timing check: ~1.5 s when it sees the
  // connection closed (disconnect_grace_ms); when another test's controller took the port and
  // the link came back up, the silence timeout: max(10 s, 4 x 500 ms x 5 misses) = 10 s.
  auto code = actor.Wait(40);
  ASSERT_TRUE(code.has_value()) << "the actor outlived its controller:\n" << actor.Output();
  EXPECT_EQ(*code, 1) << actor.Output();
  // Its closed connection, normally; on a loaded machine possibly its silence first, or
  // another test's controller now on the port refusing it: each is the controller's loss.
  const std::string said = actor.Output();
  EXPECT_TRUE(said.find("closed the connection and has not come back") != std::string::npos ||
              said.find("no answer from the controller") != std::string::npos ||
              said.find("the controller refused this actor's heartbeat") != std::string::npos)
      << said;
}

TEST(JobTest, ActorForAnotherRoleIsRefusedWithReason) {
  std::string root = FreshDir("refused");
  JobProcess job({"run", EchoConfig(), "job.run_root=" + root, "job.name=r", "job.iterations=1",
                  "echo.external=true", "echo.workers=1", "controller.register_timeout_s=20"},
                 root + "/out.txt");
  ASSERT_TRUE(job.WaitForOutput("waiting for echo-0", 30)) << job.Output();
  std::smatch m;
  std::string out = job.Output();
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(--connect (tcp://[0-9.]+:[0-9]+))")));
  auto [code, aout] = RunRlforge({"actor", "--role", "trainer", "--connect", m[1]}, 20);
  EXPECT_EQ(code, 2);
  EXPECT_NE(aout.find("role 'trainer' is not part of this job"), std::string::npos) << aout;
  job.Signal(SIGTERM);
  job.Wait(15);
}

TEST(JobTest, ActorWithNoControllerGivesUpWithAClearMessage) {
  auto [code, out] = RunRlforge(
      {"actor", "--role", "echo", "--connect", "tcp://127.0.0.1:1", "--register-timeout", "1"}, 20);
  EXPECT_EQ(code, 1);
  EXPECT_NE(out.find("no answer from a controller at tcp://127.0.0.1:1"), std::string::npos) << out;
}

}  // namespace
}  // namespace rlforge::testing
