#include "controller/run_directory.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace rlforge {

namespace fs = std::filesystem;

absl::StatusOr<RunDirectory> RunDirectory::Create(const std::string& root,
                                                  const std::string& name) {
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot create ", root, ": ", ec.message()));
  for (int i = 1; i < 10000; ++i) {
    fs::path p = fs::path(root) / (i == 1 ? name : absl::StrCat(name, "-", i));
    // create_directory is atomic: two runs started at once get different folders.
    if (fs::create_directory(p, ec)) {
      fs::create_directories(p / "logs", ec);
      if (ec)
        return absl::UnavailableError(
            absl::StrCat("cannot create ", (p / "logs").string(), ": ", ec.message()));
      return RunDirectory(p.string());
    }
    if (ec)
      return absl::UnavailableError(absl::StrCat("cannot create ", p.string(), ": ", ec.message()));
  }
  return absl::ResourceExhaustedError(absl::StrCat("too many runs named ", name, " in ", root));
}

absl::StatusOr<RunDirectory> RunDirectory::Open(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(fs::path(path) / "config.resolved.yaml", ec)) {
    return absl::NotFoundError(
        absl::StrCat(path, " is not a run directory (no config.resolved.yaml)"));
  }
  fs::create_directories(fs::path(path) / "logs", ec);
  if (ec)
    return absl::UnavailableError(absl::StrCat("cannot create ", path, "/logs: ", ec.message()));
  std::string clean = fs::path(path).lexically_normal().string();
  while (clean.size() > 1 && clean.back() == '/') clean.pop_back();
  return RunDirectory(clean);
}

std::string RunDirectory::name() const { return fs::path(path_).filename().string(); }

std::string RunDirectory::LogPath(const std::string& actor_id) const {
  return (fs::path(path_) / "logs" / (actor_id + ".log")).string();
}

absl::Status RunDirectory::WriteFile(const std::string& relative,
                                     const std::string& contents) const {
  fs::path target = fs::path(path_) / relative;
  fs::path tmp = target;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out)
      return absl::UnavailableError(
          absl::StrCat("cannot write ", tmp.string(), ": ", std::strerror(errno)));
    out << contents;
    if (!out.flush()) return absl::UnavailableError(absl::StrCat("cannot write ", tmp.string()));
  }
  std::error_code ec;
  fs::rename(tmp, target, ec);
  if (ec)
    return absl::UnavailableError(
        absl::StrCat("cannot rename to ", target.string(), ": ", ec.message()));
  return absl::OkStatus();
}

absl::StatusOr<MetricsLog> MetricsLog::Open(const std::string& path) {
  std::ofstream out(path, std::ios::app);
  if (!out)
    return absl::UnavailableError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  return MetricsLog(std::move(out));
}

absl::Status MetricsLog::Append(const nlohmann::json& record) {
  out_ << record.dump() << "\n";
  out_.flush();
  if (!out_) return absl::UnavailableError("cannot append to metrics.jsonl");
  return absl::OkStatus();
}

}  // namespace rlforge
