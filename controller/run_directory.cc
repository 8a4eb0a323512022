#include "controller/run_directory.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace rlforge {

namespace fs = std::filesystem;

absl::StatusOr<RunDirectory> RunDirectory::Create(const std::string& root, const std::string& name,
                                                  FileSystem& files) {
  RETURN_IF_ERROR(files.CreateDirectories(root));
  for (int i = 1; i < 10000; ++i) {
    const std::string p = (fs::path(root) / (i == 1 ? name : absl::StrCat(name, "-", i))).string();
    // mkdir is atomic: two runs started at once get different folders.
    ASSIGN_OR_RETURN(const bool made, files.CreateDirectory(p));
    if (!made) continue;
    RETURN_IF_ERROR(files.CreateDirectories(p + "/logs"));
    RETURN_IF_ERROR(files.SyncDirectory(root));
    return RunDirectory(p, &files);
  }
  return absl::ResourceExhaustedError(absl::StrCat("too many runs named ", name, " in ", root));
}

absl::StatusOr<RunDirectory> RunDirectory::Open(const std::string& path, FileSystem& files) {
  if (!files.Exists(path + "/config.resolved.yaml")) {
    return absl::NotFoundError(
        absl::StrCat(path, " is not a run directory (no config.resolved.yaml)"));
  }
  std::string clean = fs::path(path).lexically_normal().string();
  while (clean.size() > 1 && clean.back() == '/') clean.pop_back();
  RETURN_IF_ERROR(files.CreateDirectories(clean + "/logs"));
  return RunDirectory(clean, &files);
}

std::string RunDirectory::name() const { return fs::path(path_).filename().string(); }

std::string RunDirectory::LogPath(const std::string& actor_id) const {
  return (fs::path(path_) / "logs" / (actor_id + ".log")).string();
}

absl::Status RunDirectory::WriteFile(const std::string& relative,
                                     const std::string& contents) const {
  return WriteFileAtomic(*fs_, (fs::path(path_) / relative).string(), contents);
}

absl::StatusOr<MetricsLog> MetricsLog::Open(const std::string& path, FileSystem& fs) {
  uint64_t keep = 0;
  bool cut = false;
  if (fs.Exists(path)) {
    ASSIGN_OR_RETURN(const std::string text, fs.ReadFile(path));
    cut = !text.empty() && text.back() != '\n';
    const size_t newline = text.rfind('\n');
    keep = newline == std::string::npos ? 0 : newline + 1;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> out, fs.NewAppendableFile(path));
  // A line a crash cut short would otherwise run into the next one appended.
  if (cut) RETURN_IF_ERROR(out->Truncate(keep));
  return MetricsLog(std::move(out));
}

absl::Status MetricsLog::Append(const nlohmann::json& record) {
  return out_->Append(record.dump() + "\n");
}

}  // namespace rlforge
