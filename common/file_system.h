// The file system as the run directory and checkpoints see it: a small injectable interface
// (LevelDB's Env is the model), so tests swap in a fault-injecting one
// (common/fault_injection_file_system.h) and prove what survives ENOSPC, EIO or a crash.
//
// caller -> FileSystem (POSIX by default) -> open/pwrite/fsync/rename/unlink/mkdir/readdir
//
// Every error names the path, the operation and the errno text: "<path>: cannot <op>: <why>",
// with the status code errno maps to (ENOSPC: ResourceExhausted, ENOENT: NotFound, ...).
// A FileSystem is safe from any thread; a WritableFile belongs to one thread at a time.
// Nothing here is durable until synced: a file's data after Sync(), a new name (create,
// rename, remove) after SyncDir() of the directory holding it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace rlforge {

// An open file being written. Destroyed without Close(), it closes and drops the error.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual const std::string& path() const = 0;
  // `data` after the last byte appended (or at the end of a file opened for appending).
  virtual absl::Status Append(std::string_view data) = 0;
  // `data` at byte `offset`; the file grows as needed (a hole reads as zeros).
  virtual absl::Status WriteAt(uint64_t offset, std::string_view data) = 0;
  // Sets the file's size (grows with zeros or cuts).
  virtual absl::Status Truncate(uint64_t size) = 0;
  // The data written so far reaches the disk.
  virtual absl::Status Sync() = 0;
  virtual absl::Status Close() = 0;
};

struct FileStat {
  bool is_directory = false;
  uint64_t size = 0;  // bytes, for a regular file
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;

  // The process's real (POSIX) file system. Never destroyed.
  static FileSystem& Default();

  // Creates or truncates `path`.
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) = 0;
  // Opens `path` for appending, creating it when missing.
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(
      const std::string& path) = 0;
  virtual absl::StatusOr<std::string> ReadFile(const std::string& path) = 0;
  // NotFound when nothing is at `path`.
  virtual absl::StatusOr<FileStat> Stat(const std::string& path) = 0;
  // The names in directory `path` (not "." or ".."), sorted.
  virtual absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& path) = 0;
  // Replaces `to` atomically when it exists.
  virtual absl::Status Rename(const std::string& from, const std::string& to) = 0;
  // Removes a file or an empty directory.
  virtual absl::Status Remove(const std::string& path) = 0;
  // Makes one directory: true when made, false when something was already there (so two
  // processes racing for one name learn which got it).
  virtual absl::StatusOr<bool> CreateDirectory(const std::string& path) = 0;
  // fsync of directory `path`: names created, renamed or removed in it become durable.
  virtual absl::Status SyncDirectory(const std::string& path) = 0;

  // Built on the operations above, so a fault injected into any of them shows here too.
  bool Exists(const std::string& path);
  // mkdir -p.
  absl::Status CreateDirectories(const std::string& path);
  // rm -rf: files first, then each emptied directory; a missing path is fine.
  absl::Status RemoveTree(const std::string& path);
};

// The directory holding `path` ("." for a bare name).
std::string ParentDirectory(const std::string& path);

// Replaces `path` with `contents` so that readers see the old file or the new, never a part,
// and the new one survives a crash once this returns OK:
//   contents -> path.tmp (written, synced) -> rename over path -> sync of the directory
// A failure before the rename removes path.tmp (best effort) and leaves `path` as it was.
absl::Status WriteFileAtomic(FileSystem& fs, const std::string& path, const std::string& contents);

// fsync of the directory holding `path`, so a rename into it is durable.
absl::Status SyncParentDirectory(FileSystem& fs, const std::string& path);

}  // namespace rlforge
