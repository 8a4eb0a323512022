#include "common/fault_injection_file_system.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace rlforge {
namespace {

using Op = FaultInjectionFileSystem::Op;

// Each operation's short name (ops() in messages) and the words the POSIX file system uses
// for it, so an injected error reads as a real one; in the order of Op.
struct OpWords {
  const char* name;
  const char* verb;
};
constexpr OpWords kOpWords[] = {
    {"create", "open for writing"},
    {"open-append", "open for appending"},
    {"read", "open"},
    {"stat", "stat"},
    {"list", "list"},
    {"rename", "rename"},
    {"remove", "remove"},
    {"mkdir", "create directory"},
    {"fsync-dir", "fsync directory"},
    {"append", "write"},
    {"write-at", "write"},
    {"truncate", "resize"},
    {"fsync", "fsync"},
    {"close", "close"},
};
static_assert(std::size(kOpWords) == static_cast<size_t>(Op::kClose) + 1);

const char* Verb(Op op) { return kOpWords[static_cast<size_t>(op)].verb; }

}  // namespace

// Forwards to the base file after asking the file system whether to.
class FaultInjectionWritableFile final : public WritableFile {
 public:
  FaultInjectionWritableFile(FaultInjectionFileSystem* fs, std::unique_ptr<WritableFile> base,
                             uint64_t size)
      : fs_(fs), base_(std::move(base)), end_(size) {}

  const std::string& path() const override { return base_->path(); }

  absl::Status Append(std::string_view data) override { return Write(Op::kAppend, end_, data); }
  absl::Status WriteAt(uint64_t offset, std::string_view data) override {
    return Write(Op::kWriteAt, offset, data);
  }

  absl::Status Truncate(uint64_t size) override {
    absl::Status s;
    if (fs_->Next(Op::kTruncate, path(), 0, &s) != FaultInjectionFileSystem::Verdict::kRun) {
      return s;
    }
    fs_->MarkDirty(path());
    end_ = size;
    return base_->Truncate(size);
  }

  absl::Status Sync() override {
    absl::Status s;
    if (fs_->Next(Op::kSync, path(), 0, &s) != FaultInjectionFileSystem::Verdict::kRun) return s;
    if (fs_->sync_base_) RETURN_IF_ERROR(base_->Sync());
    fs_->MarkSynced(path());
    return absl::OkStatus();
  }

  absl::Status Close() override {
    absl::Status s;
    const auto v = fs_->Next(Op::kClose, path(), 0, &s);
    if (v == FaultInjectionFileSystem::Verdict::kRun) return base_->Close();
    base_->Close().IgnoreError();  // a failed close still closes, as close(2) does
    return s;
  }

 private:
  absl::Status Write(Op op, uint64_t offset, std::string_view data) {
    absl::Status s;
    const auto v = fs_->Next(op, path(), data.size(), &s);
    if (v == FaultInjectionFileSystem::Verdict::kFail) return s;
    if (v == FaultInjectionFileSystem::Verdict::kCrash) {
      // The first bytes land before the process dies.
      base_->WriteAt(offset, data.substr(0, std::min<uint64_t>(fs_->keep_bytes_, data.size())))
          .IgnoreError();
      fs_->MarkDirty(path());
      fs_->Die();
      return s;
    }
    fs_->MarkDirty(path());
    RETURN_IF_ERROR(base_->WriteAt(offset, data));
    end_ = std::max<uint64_t>(end_, offset + data.size());
    return absl::OkStatus();
  }

  FaultInjectionFileSystem* fs_;
  std::unique_ptr<WritableFile> base_;
  uint64_t end_;
};

const char* FaultInjectionFileSystem::OpName(Op op) {
  return kOpWords[static_cast<size_t>(op)].name;
}

void FaultInjectionFileSystem::FailAt(int64_t n, int err) {
  fail_at_ = n;
  fail_errno_ = err;
  crash_at_ = 0;
}

void FaultInjectionFileSystem::CrashAt(int64_t n, uint64_t keep_bytes, Crash how) {
  crash_at_ = n;
  keep_bytes_ = keep_bytes;
  crash_how_ = how;
  fail_at_ = 0;
}

void FaultInjectionFileSystem::Reset() {
  ops_.clear();
  fail_at_ = crash_at_ = 0;
  crashed_ = fired_ = false;
  dirty_.clear();
  synced_size_.clear();
}

FaultInjectionFileSystem::Verdict FaultInjectionFileSystem::Next(Op op, const std::string& path,
                                                                 uint64_t bytes,
                                                                 absl::Status* status,
                                                                 const std::string& verb) {
  if (crashed_) {
    *status = absl::AbortedError(
        absl::StrCat(path, ": simulated crash earlier: ", OpName(op), " not done"));
    return Verdict::kFail;
  }
  ops_.push_back({op, path, bytes});
  const int64_t n = static_cast<int64_t>(ops_.size());
  if (n == fail_at_) {
    fired_ = true;
    *status = absl::ErrnoToStatus(fail_errno_,
                                  absl::StrCat(path, ": cannot ", verb.empty() ? Verb(op) : verb));
    return Verdict::kFail;
  }
  if (n == crash_at_) {
    fired_ = true;
    *status = absl::AbortedError(absl::StrCat(path, ": simulated crash during ", OpName(op)));
    if (op != Op::kAppend && op != Op::kWriteAt) Die();
    return Verdict::kCrash;
  }
  return Verdict::kRun;
}

void FaultInjectionFileSystem::Die() {
  if (crashed_) return;
  crashed_ = true;
  if (crash_how_ != Crash::kMachine) return;
  for (const auto& [path, dirty] : dirty_) {
    if (!dirty) continue;
    const auto it = synced_size_.find(path);
    auto f = base_.NewAppendableFile(path);
    if (f.ok()) (*f)->Truncate(it == synced_size_.end() ? 0 : it->second).IgnoreError();
  }
}

void FaultInjectionFileSystem::MarkSynced(const std::string& path) {
  dirty_[path] = false;
  auto st = base_.Stat(path);
  synced_size_[path] = st.ok() ? st->size : 0;
}

absl::StatusOr<std::unique_ptr<WritableFile>> FaultInjectionFileSystem::NewWritableFile(
    const std::string& path) {
  absl::Status s;
  if (Next(Op::kCreate, path, 0, &s) != Verdict::kRun) return s;
  ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f, base_.NewWritableFile(path));
  // The truncation is itself unsynced: a machine crash may find the file empty.
  synced_size_[path] = 0;
  dirty_[path] = true;
  return std::unique_ptr<WritableFile>(new FaultInjectionWritableFile(this, std::move(f), 0));
}

absl::StatusOr<std::unique_ptr<WritableFile>> FaultInjectionFileSystem::NewAppendableFile(
    const std::string& path) {
  absl::Status s;
  if (Next(Op::kOpenAppend, path, 0, &s) != Verdict::kRun) return s;
  ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f, base_.NewAppendableFile(path));
  auto st = base_.Stat(path);
  const uint64_t size = st.ok() ? st->size : 0;
  if (!dirty_.count(path)) {
    synced_size_[path] = size;
    dirty_[path] = false;
  }
  return std::unique_ptr<WritableFile>(new FaultInjectionWritableFile(this, std::move(f), size));
}

absl::StatusOr<std::string> FaultInjectionFileSystem::ReadFile(const std::string& path) {
  absl::Status s;
  if (Next(Op::kRead, path, 0, &s) != Verdict::kRun) return s;
  return base_.ReadFile(path);
}

absl::StatusOr<FileStat> FaultInjectionFileSystem::Stat(const std::string& path) {
  absl::Status s;
  if (Next(Op::kStat, path, 0, &s) != Verdict::kRun) return s;
  return base_.Stat(path);
}

absl::StatusOr<std::vector<std::string>> FaultInjectionFileSystem::ListDirectory(
    const std::string& path) {
  absl::Status s;
  if (Next(Op::kList, path, 0, &s) != Verdict::kRun) return s;
  return base_.ListDirectory(path);
}

absl::Status FaultInjectionFileSystem::Rename(const std::string& from, const std::string& to) {
  absl::Status s;
  if (Next(Op::kRename, from, 0, &s, absl::StrCat("rename to ", to)) != Verdict::kRun) return s;
  RETURN_IF_ERROR(base_.Rename(from, to));
  if (auto it = dirty_.find(from); it != dirty_.end()) {
    dirty_[to] = it->second;
    dirty_.erase(from);
  }
  if (auto it = synced_size_.find(from); it != synced_size_.end()) {
    synced_size_[to] = it->second;
    synced_size_.erase(from);
  }
  return absl::OkStatus();
}

absl::Status FaultInjectionFileSystem::Remove(const std::string& path) {
  absl::Status s;
  if (Next(Op::kRemove, path, 0, &s) != Verdict::kRun) return s;
  RETURN_IF_ERROR(base_.Remove(path));
  dirty_.erase(path);
  synced_size_.erase(path);
  return absl::OkStatus();
}

absl::StatusOr<bool> FaultInjectionFileSystem::CreateDirectory(const std::string& path) {
  absl::Status s;
  if (Next(Op::kMakeDirectory, path, 0, &s) != Verdict::kRun) return s;
  return base_.CreateDirectory(path);
}

absl::Status FaultInjectionFileSystem::SyncDirectory(const std::string& path) {
  absl::Status s;
  if (Next(Op::kSyncDirectory, path, 0, &s) != Verdict::kRun) return s;
  return sync_base_ ? base_.SyncDirectory(path) : base_.Stat(path).status();
}

}  // namespace rlforge
