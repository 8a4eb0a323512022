// The run directory: everything a run leaves behind.
//
// runs/<name>/config.resolved.yaml, metrics.jsonl, events.jsonl, logs/<role>-<rank>.log,
// status.json (state and message, rewritten as the run progresses), checkpoints/.
//
// Files are written whole (WriteFileAtomic: temp file, fsync, rename) or appended line by
// line, so an interrupted run (ENOSPC, EIO, a kill mid-write) leaves every file readable: a
// whole file is the old one or the new, and a line cut by a crash is dropped when the log is
// next opened. Every write goes through the FileSystem the directory was made with
// (common/file_system.h), which checkpoints use too (controller/job_checkpoint.h).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/file_system.h"
#include "nlohmann/json.hpp"

namespace rlforge {

class RunDirectory {
 public:
  // Creates <root>/<name>; if it exists, <root>/<name>-2, -3, ... `fs` must outlive it.
  static absl::StatusOr<RunDirectory> Create(const std::string& root, const std::string& name,
                                             FileSystem& fs = FileSystem::Default());

  // An existing run directory (`rlforge run --resume`): it must hold config.resolved.yaml.
  static absl::StatusOr<RunDirectory> Open(const std::string& path,
                                           FileSystem& fs = FileSystem::Default());

  const std::string& path() const { return path_; }
  std::string name() const;
  std::string LogPath(const std::string& actor_id) const;
  // Writes `relative` atomically.
  absl::Status WriteFile(const std::string& relative, const std::string& contents) const;
  FileSystem& fs() const { return *fs_; }

 private:
  RunDirectory(std::string path, FileSystem* fs) : path_(std::move(path)), fs_(fs) {}
  std::string path_;
  FileSystem* fs_;
};

// metrics.jsonl (or events.jsonl): one JSON object per line, each line written by one write
// (not fsync'ed: a kill keeps it, a power loss may not).
class MetricsLog {
 public:
  // Opens `path` for appending, first cutting off a last line left without its newline.
  static absl::StatusOr<MetricsLog> Open(const std::string& path,
                                         FileSystem& fs = FileSystem::Default());
  absl::Status Append(const nlohmann::json& record);

 private:
  explicit MetricsLog(std::unique_ptr<WritableFile> out) : out_(std::move(out)) {}
  std::unique_ptr<WritableFile> out_;
};

}  // namespace rlforge
