// Whole-job checkpoints and the run directory under every injected file-system failure: each
// test saves once with no fault to count the operations, then once per failure point (ENOSPC,
// EIO, a process crash cutting the write at every byte, a machine crash losing unsynced data)
// and checks, as a restarted job would with the real file system, that the previous
// checkpoint loads whole, the error names the file, the operation and errno's text, and the
// run directory still reads (`rlforge status`, resume).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <functional>

#include "absl/strings/str_cat.h"
#include "common/fault_injection_file_system.h"
#include "controller/job_checkpoint.h"
#include "controller/run_directory.h"
#include "dashboard/status_command.h"

namespace rlforge {
namespace {

using Fault = FaultInjectionFileSystem;

// What one failure point injects.
struct Injection {
  int err = 0;        // FailAt(n, err) when non-zero
  uint64_t keep = 0;  // else CrashAt(n, keep, how)
  Fault::Crash how = Fault::Crash::kProcess;
  std::string expect;  // in the error text
};

// Every injection at operation n of a recorded save: both errnos, a process crash cut at every
// byte of a write (at its start for other operations), a machine crash mid-write.
std::vector<Injection> InjectionsAt(const Fault::Record& op) {
  std::vector<Injection> out = {{ENOSPC, 0, {}, "No space left on device"},
                                {EIO, 0, {}, "Input/output error"}};
  for (uint64_t k = 0; k < std::max<uint64_t>(op.bytes, 1); ++k) {
    out.push_back({0, k, Fault::Crash::kProcess, "simulated crash"});
  }
  out.push_back({0, op.bytes / 2, Fault::Crash::kMachine, "simulated crash"});
  return out;
}

void Arm(Fault& fs, int64_t n, const Injection& i) {
  fs.Reset();
  if (i.err != 0) {
    fs.FailAt(n, i.err);
  } else {
    fs.CrashAt(n, i.keep, i.how);
  }
}

std::string Read(const std::string& path) {
  auto s = FileSystem::Default().ReadFile(path);
  return s.ok() ? *s : "<missing>";
}

class CheckpointFaultTest : public ::testing::Test {
 protected:
  // On tmpfs where there is one: the fault-injecting file system models what fsync makes
  // durable, and the hundreds of runs made and removed here cost seconds, not a minute, there.
  void SetUp() override {
    const std::filesystem::path base = std::filesystem::is_directory("/dev/shm")
                                           ? std::filesystem::path("/dev/shm")
                                           : std::filesystem::temp_directory_path();
    root_ = (base / ("rlforge_ckpt_fault_" + std::to_string(::getpid()))).string();
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  // A fresh run holding a whole checkpoint of step 2 and two metrics records.
  std::string FreshRun() {
    std::filesystem::remove_all(root_);
    setup_.Reset();
    auto dir = RunDirectory::Create(root_, "run", setup_);
    EXPECT_TRUE(dir.ok()) << dir.status();
    EXPECT_TRUE(dir->WriteFile("config.resolved.yaml", "job: {name: run}\n").ok());
    EXPECT_TRUE(dir->WriteFile("status.json", R"({"state": "stopped", "algorithm": "ppo"})").ok());
    auto metrics = MetricsLog::Open(dir->path() + "/metrics.jsonl", setup_);
    EXPECT_TRUE(metrics.ok() && metrics->Append({{"step", 1}}).ok() &&
                metrics->Append({{"step", 2}}).ok());
    EXPECT_TRUE(Save(*dir, 2).ok());
    return dir->path();
  }

  // A save of `step` whose two actors write their files through the run directory's file
  // system, as the trainer and a rollout worker do.
  static absl::Status Save(const RunDirectory& run, int64_t step) {
    return SaveJobCheckpoint(run, step, "ppo", {{"iteration", step}}, /*keep=*/1,
                             [&](const std::string& dir) -> absl::Status {
                               for (const char* actor : {"trainer-0", "rollout-0"}) {
                                 const std::string d = dir + "/" + actor;
                                 absl::Status s = run.fs().CreateDirectories(d);
                                 if (s.ok())
                                   s = WriteFileAtomic(run.fs(), d + "/state.pt",
                                                       ActorBytes(actor, step));
                                 if (!s.ok()) return s;
                               }
                               return absl::OkStatus();
                             });
  }

  static std::string ActorBytes(const std::string& actor, int64_t step) {
    return actor + " state of step " + std::to_string(step);
  }

  // The checkpoint of `step` as a resumed job would find it: every file whole.
  static void ExpectWhole(const JobCheckpoint& c) {
    EXPECT_EQ(Read(c.dir + "/controller.json"),
              "{\n \"iteration\": " + std::to_string(c.step) + "\n}\n");
    EXPECT_EQ(c.controller["iteration"], c.step);
    for (const char* actor : {"trainer-0", "rollout-0"}) {
      EXPECT_EQ(Read(c.dir + "/" + actor + "/state.pt"), ActorBytes(actor, c.step));
    }
  }

  // What a restarted job and `rlforge status` read, with the real file system.
  static void ExpectReadable(const std::string& run) {
    ASSERT_TRUE(RunDirectory::Open(run).ok());
    auto status = dashboard::StatusText(run, "");
    ASSERT_TRUE(status.ok()) << status.status();
    EXPECT_NE(status->find("state      stopped"), std::string::npos) << *status;
  }

  // The operations `write` makes on a fresh run with no fault.
  std::vector<Fault::Record> DryRun(const std::function<absl::Status(const RunDirectory&)>& write) {
    auto dir = RunDirectory::Open(FreshRun(), fs_);
    EXPECT_TRUE(dir.ok()) << dir.status();
    fs_.Reset();
    EXPECT_TRUE(write(*dir).ok());
    return fs_.ops();
  }

  // A fresh run, opened on fs_ armed with injection `i` at operation n.
  RunDirectory ArmedRun(int64_t n, const Injection& i) {
    fs_.Reset();  // the process a crash ended starts again
    auto dir = RunDirectory::Open(FreshRun(), fs_);
    EXPECT_TRUE(dir.ok()) << dir.status();
    Arm(fs_, n, i);
    return *dir;
  }

  static std::string Trace(size_t n, const Fault::Record& op, const Injection& i) {
    return absl::StrCat("operation ", n, " (", Fault::OpName(op.op), " ", op.path, "), ", i.expect,
                        " keeping ", i.keep);
  }

  std::string root_;
  Fault fs_{FileSystem::Default(), /*sync_base=*/false};
  // Never armed: what a run wrote before the save under test, without the real fsyncs.
  Fault setup_{FileSystem::Default(), /*sync_base=*/false};
};

TEST_F(CheckpointFaultTest, EveryFailurePointOfASaveLeavesTheLastCheckpointWholeAndNamesIt) {
  const std::vector<Fault::Record> ops =
      DryRun([](const RunDirectory& dir) { return Save(dir, 4); });
  ASSERT_GT(ops.size(), 20u);
  int injected = 0, failed = 0;
  for (size_t n = 1; n <= ops.size() + 1; ++n) {
    const Fault::Record op = n <= ops.size() ? ops[n - 1] : Fault::Record{};
    for (const Injection& i : InjectionsAt(op)) {
      SCOPED_TRACE(Trace(n, op, i));
      const RunDirectory dir = ArmedRun(static_cast<int64_t>(n), i);
      const std::string run = dir.path();
      const absl::Status s = Save(dir, 4);
      if (!fs_.fired()) {  // past the last operation: the save goes through
        ASSERT_EQ(n, ops.size() + 1);
        ASSERT_TRUE(s.ok()) << s;
        break;
      }
      ++injected;
      std::vector<std::string> skipped;
      auto found = FindNewestCheckpoint(run, &skipped);
      ASSERT_TRUE(found.ok() && found->has_value()) << "no checkpoint left";
      ExpectWhole(**found);
      if (!s.ok()) {
        ++failed;
        const std::string text(s.message());
        EXPECT_EQ(text.rfind("checkpoint " + CheckpointStateDir(run, 4) + ": ", 0), 0u) << text;
        EXPECT_NE(text.find(op.path), std::string::npos) << text;
        EXPECT_NE(text.find(i.expect), std::string::npos) << text;
        // Nothing older goes before a newer checkpoint is complete: step 2 is whole (step 4
        // may be too, when a crash hit the last directory sync after its manifest landed).
        ASSERT_NE(Read(CheckpointStateDir(run, 2) + "/manifest.json"), "<missing>");
        ExpectWhole(JobCheckpoint{2, CheckpointStateDir(run, 2), {{"iteration", 2}}});
      } else {
        EXPECT_EQ((*found)->step, 4);  // the fault hit the pruning of step 2, which only warns
      }
      // A pruning cut short never leaves step 2 reading as complete with files gone.
      if (Read(CheckpointStateDir(run, 2) + "/manifest.json") != "<missing>") {
        ExpectWhole(JobCheckpoint{2, CheckpointStateDir(run, 2), {{"iteration", 2}}});
      }
      ExpectReadable(run);
      ASSERT_TRUE(TruncateMetrics(run + "/metrics.jsonl", (*found)->step, setup_).ok());
    }
  }
  EXPECT_GT(injected, static_cast<int>(ops.size()) * 3);
  EXPECT_GT(failed, static_cast<int>(ops.size()));
}

// What a run writes as it goes (status.json, metrics.jsonl, the metrics cut of a resume), in
// one sequence that stops at its first error.
absl::Status WriteAsARunDoes(const RunDirectory& dir) {
  absl::Status s = dir.WriteFile("status.json", R"({"state": "stopped", "message": "later"})");
  if (!s.ok()) return s;
  auto metrics = MetricsLog::Open(dir.path() + "/metrics.jsonl", dir.fs());
  if (!metrics.ok()) return metrics.status();
  for (int64_t step : {3, 4}) {
    if (s = metrics->Append({{"step", step}, {"metrics", {{"loss", 0.5}}}}); !s.ok()) return s;
  }
  return TruncateMetrics(dir.path() + "/metrics.jsonl", 3, dir.fs());
}

// Every line of the file parses, once a log is opened on it again and appended to.
void ExpectWholeLines(const std::string& path) {
  auto log = MetricsLog::Open(path);
  ASSERT_TRUE(log.ok()) << log.status();
  ASSERT_TRUE(log->Append({{"step", 9}}).ok());
  const std::string text = Read(path);
  size_t start = 0, lines = 0;
  for (size_t end; (end = text.find('\n', start)) != std::string::npos; start = end + 1) {
    const auto j = nlohmann::json::parse(text.substr(start, end - start), nullptr, false);
    EXPECT_TRUE(j.is_object()) << "line " << lines << " of " << path << ": " << text;
    ++lines;
  }
  EXPECT_EQ(start, text.size()) << "a last line without its newline";
  EXPECT_GE(lines, 3u);
}

TEST_F(CheckpointFaultTest, EveryFailurePointOfTheRunsOwnWritesLeavesItReadable) {
  const std::vector<Fault::Record> ops = DryRun(WriteAsARunDoes);
  for (size_t n = 1; n <= ops.size(); ++n) {
    for (const Injection& i : InjectionsAt(ops[n - 1])) {
      SCOPED_TRACE(Trace(n, ops[n - 1], i));
      const RunDirectory dir = ArmedRun(static_cast<int64_t>(n), i);
      const std::string run = dir.path();
      const absl::Status s = WriteAsARunDoes(dir);
      ASSERT_TRUE(fs_.fired());
      if (!s.ok()) {
        EXPECT_NE(s.message().find(i.expect), std::string::npos) << s;
      }
      ExpectReadable(run);
      ExpectWholeLines(run + "/metrics.jsonl");
      std::vector<std::string> skipped;
      auto found = FindNewestCheckpoint(run, &skipped);
      ASSERT_TRUE(found.ok() && found->has_value());
      ExpectWhole(**found);
    }
  }
}

}  // namespace
}  // namespace rlforge
