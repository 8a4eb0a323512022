#include "dashboard/status_command.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/net_address.h"
#include "common/process_identity.h"

namespace rlforge::dashboard {
namespace {

namespace fs = std::filesystem;

class StatusCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/status_command_" + std::to_string(getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ofstream metrics(dir_ + "/metrics.jsonl");
    metrics << R"({"step": 457, "metrics": {"episodic_return": 20}, "timings": {"elapsed_s": 7.0}})"
            << "\n"
            << R"({"step": 458, "metrics": {"episodic_return": 21}, "timings": {"elapsed_s": 8.0}})"
            << "\n";
  }
  void TearDown() override { fs::remove_all(dir_); }

  // status.json as the controller `p` writes it for a run in `state`.
  void WriteStatus(const std::string& state, const ProcessIdentity& p, int64_t total,
                   int64_t resumed_from = 0) {
    nlohmann::json j{{"state", state},
                     {"message", ""},
                     {"host", p.host},
                     {"pid", p.pid},
                     {"pid_start_ticks", p.start_ticks},
                     {"boot_id", p.boot_id},
                     {"algorithm", "ppo"},
                     {"resumed_from", resumed_from}};
    if (total > 0) j["total"] = total;
    std::ofstream(dir_ + "/status.json") << j.dump(2) << "\n";
  }

  std::string Status() {
    auto text = StatusText(dir_, "");
    EXPECT_TRUE(text.ok()) << text.status();
    return text.ok() ? *text : "";
  }

  std::string dir_;
};

// Issue 42: after the controller was SIGKILLed, `rlforge status` printed "state running
// iteration 458/10": its pid was gone and nobody looked.
TEST_F(StatusCommandTest, ARunWhoseControllerIsGoneIsDeadNotRunning) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  ProcessIdentity gone = SelfIdentity();
  gone.pid = child;
  WriteStatus("running", gone, 19532);
  const std::string out = Status();
  EXPECT_NE(
      out.find("state      dead (controller pid " + std::to_string(child) + " gone; last written "),
      std::string::npos)
      << out;
  EXPECT_NE(out.find("status.json still says running)  iteration 458/19532  elapsed 8s\n"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("eta"), std::string::npos) << out;
}

TEST_F(StatusCommandTest, ARunWhosePidIsAnotherProcessNowIsDead) {
  ProcessIdentity reused = SelfIdentity();
  reused.start_ticks += 1;
  WriteStatus("waiting", reused, 19532);
  const std::string out = Status();
  EXPECT_NE(out.find("state      dead (controller pid " + std::to_string(getpid()) +
                     " gone (the pid is another process now)"),
            std::string::npos)
      << out;
}

// A live controller: the state as written, and the ETA of this attempt (resumed after 450:
// 8 s for 8 iterations, 19074 left).
TEST_F(StatusCommandTest, ALiveRunKeepsItsStateAndThisAttemptsEta) {
  WriteStatus("running", SelfIdentity(), 19532, 450);
  const std::string out = Status();
  EXPECT_NE(out.find("state      running  iteration 458/19532  elapsed 8s  eta 5h17m\n"),
            std::string::npos)
      << out;
}

TEST_F(StatusCommandTest, AControllerOnAnotherHostIsUnknownNotGuessed) {
  ProcessIdentity there = SelfIdentity();
  there.host = "elsewhere.example";
  WriteStatus("running", there, 19532);
  const std::string out = Status();
  EXPECT_NE(out.find("state      unknown (controller pid " + std::to_string(there.pid) +
                     " runs on host elsewhere.example, not this one (" + LocalHostName() +
                     "); status.json says running)"),
            std::string::npos)
      << out;
}

// A run that ended says so whether or not its controller is still there.
TEST_F(StatusCommandTest, AFinishedRunIsNotCheckedForItsController) {
  ProcessIdentity gone = SelfIdentity();
  gone.start_ticks += 1;
  WriteStatus("finished", gone, 458);
  EXPECT_NE(Status().find("state      finished  iteration 458/458"), std::string::npos);
}

// Before the loop says how many iterations it runs, the total is not job.iterations' default.
TEST_F(StatusCommandTest, ATotalNotKnownYetIsAQuestionMark) {
  WriteStatus("starting", SelfIdentity(), 0);
  EXPECT_NE(Status().find("iteration 458/?"), std::string::npos) << Status();
}

// A line cut short by a crash (ENOSPC, a kill mid-write) hides neither the step nor the
// metrics of the last whole record.
TEST_F(StatusCommandTest, ALastLineCutByACrashIsPassedOver) {
  std::ofstream(dir_ + "/metrics.jsonl", std::ios::app) << R"({"step": 459, "metr)";
  WriteStatus("stopped", SelfIdentity(), 460);
  const std::string out = Status();
  EXPECT_NE(out.find("iteration 458/460"), std::string::npos) << out;
  EXPECT_NE(out.find("episodic_return=21"), std::string::npos) << out;
}

}  // namespace
}  // namespace rlforge::dashboard
