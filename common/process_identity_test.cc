#include "common/process_identity.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/net_address.h"

namespace rlforge {
namespace {

TEST(ProcessIdentityTest, ParsesStatWhateverTheCommandIsCalled) {
  // Field 22 (starttime) is 777; the command name holds spaces and a ") (".
  const std::string tail = " S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 777 20 21";
  auto s = ParseProcStat("4242 (a) (b c)" + tail);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->state, 'S');
  EXPECT_EQ(s->start_ticks, 777);
  EXPECT_FALSE(ParseProcStat("4242 no parens S 1").has_value());
  EXPECT_FALSE(ParseProcStat("4242 (x) S 1 2 3").has_value());
}

TEST(ProcessIdentityTest, ThisProcessIsAlive) {
  const ProcessIdentity self = SelfIdentity();
  EXPECT_EQ(self.pid, getpid());
  EXPECT_GT(self.start_ticks, 0);
  EXPECT_FALSE(self.boot_id.empty());
  const LivenessCheck c = CheckProcess(self, LocalHostName());
  EXPECT_EQ(c.liveness, Liveness::kAlive) << c.why;
}

// The pid of a reused process: same number, another start time.
TEST(ProcessIdentityTest, APidNowHeldByAnotherProcessIsGone) {
  ProcessIdentity other = SelfIdentity();
  other.start_ticks += 1;
  const LivenessCheck c = CheckProcess(other, LocalHostName());
  EXPECT_EQ(c.liveness, Liveness::kGone);
  EXPECT_NE(c.why.find("another process"), std::string::npos) << c.why;
}

TEST(ProcessIdentityTest, AKilledProcessIsGoneBeforeAndAfterItIsReaped) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  ProcessIdentity p;
  p.host = LocalHostName();
  p.pid = child;
  // The child's own identity, read from outside while it runs.
  std::ifstream stat("/proc/" + std::to_string(child) + "/stat");
  std::string line;
  ASSERT_TRUE(std::getline(stat, line));
  p.start_ticks = ParseProcStat(line)->start_ticks;
  p.boot_id = SelfIdentity().boot_id;
  EXPECT_EQ(CheckProcess(p, LocalHostName()).liveness, Liveness::kAlive);
  ASSERT_EQ(kill(child, SIGKILL), 0);
  // Exited but not reaped (a zombie): WNOWAIT waits for the exit and leaves it so.
  siginfo_t info{};
  ASSERT_EQ(waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT), 0);
  LivenessCheck c = CheckProcess(p, LocalHostName());
  EXPECT_EQ(c.liveness, Liveness::kGone) << c.why;
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  c = CheckProcess(p, LocalHostName());
  EXPECT_EQ(c.liveness, Liveness::kGone) << c.why;
  EXPECT_NE(c.why.find("pid " + std::to_string(child) + " gone"), std::string::npos) << c.why;
}

TEST(ProcessIdentityTest, AnotherHostsProcessIsUnknownHere) {
  ProcessIdentity p = SelfIdentity();
  p.host = "elsewhere.example";
  const LivenessCheck c = CheckProcess(p, LocalHostName());
  EXPECT_EQ(c.liveness, Liveness::kUnknown);
  EXPECT_NE(c.why.find("runs on host elsewhere.example"), std::string::npos) << c.why;
}

TEST(ProcessIdentityTest, AnotherBootsProcessIsGone) {
  ProcessIdentity p = SelfIdentity();
  p.boot_id = "00000000-0000-0000-0000-000000000000";
  const LivenessCheck c = CheckProcess(p, LocalHostName());
  EXPECT_EQ(c.liveness, Liveness::kGone);
  EXPECT_NE(c.why.find("rebooted"), std::string::npos) << c.why;
}

// An old status.json has a pid only: a process with that pid may be anyone.
TEST(ProcessIdentityTest, APidWithoutAStartTimeIsNotTakenForTheController) {
  ProcessIdentity p;
  p.host = LocalHostName();
  p.pid = getpid();
  EXPECT_EQ(CheckProcess(p, LocalHostName()).liveness, Liveness::kUnknown);
}

// A made-up /proc: what the functions read, and nothing else.
TEST(ProcessIdentityTest, ReadsUnderTheGivenProcRoot) {
  const std::string root = ::testing::TempDir() + "/fake_proc_" + std::to_string(getpid());
  std::filesystem::create_directories(root + "/77");
  std::filesystem::create_directories(root + "/sys/kernel/random");
  std::ofstream(root + "/sys/kernel/random/boot_id") << "boot-a\n";
  std::ofstream(root + "/77/stat")
      << "77 (ctl) Z 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 500 20 21\n";
  ProcessIdentity p{"h", 77, 500, "boot-a"};
  LivenessCheck c = CheckProcess(p, "h", root);
  EXPECT_EQ(c.liveness, Liveness::kGone) << c.why;
  EXPECT_NE(c.why.find("not reaped"), std::string::npos) << c.why;
  std::ofstream(root + "/77/stat")
      << "77 (ctl) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 500 20 21\n";
  EXPECT_EQ(CheckProcess(p, "h", root).liveness, Liveness::kAlive);
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace rlforge
