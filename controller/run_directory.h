// The run directory: everything a run leaves behind.
//
// runs/<name>/config.resolved.yaml, metrics.jsonl, logs/<role>-<rank>.log,
// status.json (state and message, rewritten as the run progresses).
//
// Files are written whole (temp file + rename) or appended line by line and
// flushed, so an interrupted run leaves every file readable.
#pragma once

#include <fstream>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace rlforge {

class RunDirectory {
 public:
  // Creates <root>/<name>; if it exists, <root>/<name>-2, -3, ...
  static absl::StatusOr<RunDirectory> Create(const std::string& root, const std::string& name);

  // An existing run directory (`rlforge run --resume`): it must hold config.resolved.yaml.
  static absl::StatusOr<RunDirectory> Open(const std::string& path);

  const std::string& path() const { return path_; }
  std::string name() const;
  std::string LogPath(const std::string& actor_id) const;
  // Writes `relative` atomically.
  absl::Status WriteFile(const std::string& relative, const std::string& contents) const;

 private:
  explicit RunDirectory(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

// metrics.jsonl: one JSON object per line, flushed per line.
class MetricsLog {
 public:
  static absl::StatusOr<MetricsLog> Open(const std::string& path);
  absl::Status Append(const nlohmann::json& record);

 private:
  explicit MetricsLog(std::ofstream out) : out_(std::move(out)) {}
  std::ofstream out_;
};

}  // namespace rlforge
