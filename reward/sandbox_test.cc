// The sandbox contains hostile programs (fork bomb, endless loop, memory hog, writes outside
// its folder, a socket to the host) and the code reward scores pass fractions with it.
#include "reward/sandbox.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "reward/code_reward.h"

namespace rlforge::reward {
namespace {

const char* kPython = "/usr/bin/python3";

class SandboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (getuid() != 0) GTEST_SKIP() << "the sandbox needs root (namespaces, mounts, setuid)";
  }
  // Runs `code` as main.py under `limits`.
  SandboxRun Python(const std::string& code, SandboxLimits limits = {}) {
    absl::StatusOr<SandboxRun> run = RunInSandbox({kPython, "-I", "main.py"},
                                                  {{"main.py", code}}, limits);
    EXPECT_TRUE(run.ok()) << run.status();
    return run.ok() ? *run : SandboxRun{};
  }
};

// Processes on the host whose real uid is `uid` (a run's own).
int ProcessesOf(int64_t uid) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    std::ifstream status(e.path() / "status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("Uid:", 0) == 0) {
        n += std::stol(line.substr(4)) == uid ? 1 : 0;
        break;
      }
    }
  }
  return n;
}

TEST_F(SandboxTest, RunsAProgramWithItsFilesAndReturnsItsOutputAndExitCode) {
  absl::StatusOr<SandboxRun> run = RunInSandbox(
      {kPython, "-I", "main.py"},
      {{"main.py", "import sys\nprint(open('data.txt').read())\nsys.exit(3)"}, {"data.txt", "42"}},
      {});
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->out, "42\n");
  EXPECT_EQ(run->exit_code, 3);
  EXPECT_FALSE(run->Passed());
  EXPECT_TRUE(Python("print('ok')").Passed());
}

// The wall-time limit is far above the CPU limit (a loaded machine still gives 1 CPU second
// within it), so what ends the loop is RLIMIT_CPU: SIGXCPU, or SIGKILL at the hard limit.
TEST_F(SandboxTest, EndlessLoopIsKilledByItsCpuLimit) {
  SandboxLimits l;
  l.cpu_s = 1;
  l.wall_s = 300;
  SandboxRun run = Python("while True:\n    pass\n", l);
  EXPECT_FALSE(run.timed_out);
  EXPECT_TRUE(run.signal == SIGXCPU || run.signal == SIGKILL) << run.Describe();
}

TEST_F(SandboxTest, SleeperIsKilledAtItsWallTime) {
  SandboxLimits l;
  l.wall_s = 1;
  SandboxRun run = Python("import time\ntime.sleep(1000)\n", l);
  EXPECT_TRUE(run.timed_out);
  EXPECT_EQ(run.signal, SIGKILL);
  EXPECT_EQ(ProcessesOf(run.uid), 0);
}

TEST_F(SandboxTest, ForkBombIsContainedAndLeavesNoProcess) {
  SandboxLimits l;
  l.processes = 8;
  l.wall_s = 3;
  SandboxRun run = Python(
      "import os, time\n"
      "for _ in range(10000):\n"
      "    try:\n        os.fork()\n    except OSError:\n        pass\n"
      "time.sleep(1000)\n",
      l);
  EXPECT_FALSE(run.Passed());
  EXPECT_EQ(ProcessesOf(run.uid), 0);  // killing the namespace's init killed every fork
}

TEST_F(SandboxTest, MemoryHogGetsNoMoreThanItsLimit) {
  SandboxLimits l;
  l.memory_bytes = 128ll << 20;
  SandboxRun run = Python("x = bytearray(1 << 30)\nprint('allocated')\n", l);
  EXPECT_FALSE(run.Passed());
  EXPECT_EQ(run.out.find("allocated"), std::string::npos);
  EXPECT_NE(run.err.find("MemoryError"), std::string::npos) << run.err;
}

TEST_F(SandboxTest, WritesOutsideItsFolderNeverReachTheHost) {
  const std::string mine = absl::StrCat("/tmp/rlforge_sandbox_escape_", getpid());
  const std::string home = absl::StrCat("/root/rlforge_sandbox_escape_", getpid());
  const std::string here = absl::StrCat(std::filesystem::current_path().string(),
                                        "/rlforge_sandbox_escape_", getpid());
  std::string code = "import os\nfor p in [";
  for (const std::string& p : {mine, home, here, std::string("/var/tmp/escape"),
                               std::string("/dev/shm/escape")}) {
    code += "'" + p + "', ";
  }
  code += "]:\n    try:\n        open(p, 'w').write('x')\n        print('wrote', p)\n"
          "    except OSError as e:\n        print('refused', p, e.errno)\n";
  SandboxRun run = Python(code);
  EXPECT_TRUE(run.Passed()) << run.Describe() << run.err;
  for (const std::string& p : {mine, home, here, std::string("/var/tmp/escape"),
                               std::string("/dev/shm/escape")}) {
    EXPECT_FALSE(std::filesystem::exists(p)) << p << " reached the host; output:\n" << run.out;
  }
}

TEST_F(SandboxTest, FileLargerThanItsLimitIsRefused) {
  SandboxLimits l;
  l.file_bytes = 1 << 20;
  SandboxRun run = Python("open('big', 'wb').write(b'x' * (4 << 20))\nprint('wrote')\n", l);
  EXPECT_FALSE(run.Passed());
  EXPECT_EQ(run.out.find("wrote"), std::string::npos);
}

TEST_F(SandboxTest, SocketToTheHostCannotConnect) {
  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(listener, 4), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  SandboxRun run = Python(absl::StrCat(
      "import socket\ns = socket.socket()\ns.settimeout(2)\n"
      "try:\n    s.connect(('127.0.0.1', ", port, "))\n    print('connected')\n"
      "except OSError as e:\n    print('blocked', e)\n"));
  EXPECT_NE(run.out.find("blocked"), std::string::npos) << run.out << run.err;
  EXPECT_LT(accept(listener, nullptr, nullptr), 0);  // nothing reached the host's listener
  close(listener);
}

TEST_F(SandboxTest, SetupErrorsAreErrorsNotFailedRuns) {
  EXPECT_FALSE(RunInSandbox({"python3"}, {}, {}).ok());  // not an absolute path
  absl::StatusOr<SandboxRun> missing = RunInSandbox({"/usr/bin/no_such_interpreter"}, {}, {});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("exec"), std::string::npos) << missing.status();
  EXPECT_FALSE(RunInSandbox({kPython}, {{"../x", ""}}, {}).ok());
}

TEST_F(SandboxTest, CodeRewardScoresThePassFraction) {
  CodeRewardOptions o;
  o.limits.wall_s = 120;  // far above what these programs need: the outcome is not a race
  std::unique_ptr<Reward> r = MakeCodeReward(o);
  const std::string tests = R"(["assert add(1, 2) == 3", "assert add(-1, 1) == 0",
                               "assert add(2, 2) == 5"])";
  SampleScore s = r->ScoreOne({"", "Here:\n```python\ndef add(a, b):\n    return a + b\n```\n", tests});
  ASSERT_TRUE(s.ok()) << s.error;
  EXPECT_DOUBLE_EQ(s.value, 2.0 / 3.0);
  SampleScore hostile = r->ScoreOne({"", "import os\nwhile True:\n    os.fork()\n", tests});
  ASSERT_TRUE(hostile.ok()) << hostile.error;
  EXPECT_EQ(hostile.value, 0);
  SampleScore bad = r->ScoreOne({"", "def add(a, b): return a + b", "not json"});
  EXPECT_FALSE(bad.ok());  // a data error, not a score of 0
  EXPECT_NE(bad.error.find("JSON list of tests"), std::string::npos);
}

TEST(CodeRewardParsingTest, ProgramIsTheLastFencedBlockOrTheWholeResponse) {
  EXPECT_EQ(ExtractProgram("x = 1"), "x = 1");
  EXPECT_EQ(ExtractProgram("a\n```python\nx = 1\n```\nb\n```\ny = 2\n```"), "y = 2\n");
  EXPECT_EQ(ExtractProgram("```python\nx = 1\n```"), "x = 1\n");
  ASSERT_TRUE(ParseTests(R"({"tests": ["assert True"]})").ok());
  EXPECT_EQ(ParseTests(R"(["a", "b"])")->size(), 2u);
  EXPECT_FALSE(ParseTests("[]").ok());
  EXPECT_FALSE(ParseTests("[1]").ok());
}

}  // namespace
}  // namespace rlforge::reward
