// A FileSystem that fails on purpose, for tests: over another one (the real file system in a
// test directory), it counts every operation and can make one of them fail with an errno or
// crash the "process" in the middle of a write.
//
// caller -> FaultInjectionFileSystem (counts, fails operation n) -> base FileSystem
//
// Every call of a FileSystem or WritableFile virtual method is one operation, numbered 1, 2, ...
// from construction or Reset(). Armed with
//   FailAt(n, err)      operation n changes nothing and returns errno `err`'s error (ENOSPC,
//                       EIO, ...) worded as the real one; later operations work.
//   CrashAt(n, k, how)  the process dies at operation n: a write keeps only the first k bytes
//                       of its data (any other operation does nothing); with kMachine, every
//                       file then loses what was written since its last Sync (cut back to its
//                       synced size). Operation n fails with Aborted "<path>: simulated
//                       crash during <op>", every later one with "<path>: simulated crash
//                       earlier: <op> not done".
// ops() records every operation attempted (kind, path, bytes), so a test runs a save once with
// no fault, then once per failure point. Renames and removes are never undone by a crash
// (directory entries are modelled as synced); one thread at a time.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/file_system.h"

namespace rlforge {

class FaultInjectionFileSystem final : public FileSystem {
 public:
  enum class Op {
    kCreate,
    kOpenAppend,
    kRead,
    kStat,
    kList,
    kRename,
    kRemove,
    kMakeDirectory,
    kSyncDirectory,
    kAppend,
    kWriteAt,
    kTruncate,
    kSync,
    kClose
  };
  struct Record {
    Op op;
    std::string path;
    uint64_t bytes = 0;  // data of a write
  };
  enum class Crash { kProcess, kMachine };

  // With sync_base false, Sync and SyncDirectory are counted and modelled (a machine crash
  // still loses what was not synced) but not passed to `base`: fsync costs milliseconds on a
  // disk, and a test that saves once per failure point makes thousands.
  explicit FaultInjectionFileSystem(FileSystem& base, bool sync_base = true)
      : base_(base), sync_base_(sync_base) {}

  void FailAt(int64_t n, int err);
  void CrashAt(int64_t n, uint64_t keep_bytes, Crash how = Crash::kProcess);
  // Counts from 1 again, forgets ops(), disarms, and brings a crashed process back.
  void Reset();

  const std::vector<Record>& ops() const { return ops_; }
  bool crashed() const { return crashed_; }
  // Whether the armed fault was reached.
  bool fired() const { return fired_; }
  static const char* OpName(Op op);

  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(const std::string& path) override;
  absl::StatusOr<std::string> ReadFile(const std::string& path) override;
  absl::StatusOr<FileStat> Stat(const std::string& path) override;
  absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& path) override;
  absl::Status Rename(const std::string& from, const std::string& to) override;
  absl::Status Remove(const std::string& path) override;
  absl::StatusOr<bool> CreateDirectory(const std::string& path) override;
  absl::Status SyncDirectory(const std::string& path) override;

 private:
  friend class FaultInjectionWritableFile;
  enum class Verdict { kRun, kFail, kCrash };

  // Records operation `op` and says whether it runs, fails or crashes. `status` is set for
  // the last two; `verb` replaces the operation's usual words in an injected error.
  Verdict Next(Op op, const std::string& path, uint64_t bytes, absl::Status* status,
               const std::string& verb = "");
  // Applies a crash's loss of unsynced data (kMachine), once.
  void Die();
  void MarkDirty(const std::string& path) { dirty_[path] = true; }
  void MarkSynced(const std::string& path);

  FileSystem& base_;
  const bool sync_base_;
  std::vector<Record> ops_;
  int64_t fail_at_ = 0;
  int fail_errno_ = 0;
  int64_t crash_at_ = 0;
  uint64_t keep_bytes_ = 0;
  Crash crash_how_ = Crash::kProcess;
  bool crashed_ = false;
  bool fired_ = false;
  // Files written through this object: whether each holds data not yet synced, and the size
  // it had when last synced (or opened).
  std::map<std::string, bool> dirty_;
  std::map<std::string, uint64_t> synced_size_;
};

}  // namespace rlforge
