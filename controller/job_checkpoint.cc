#include "controller/job_checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "controller/algorithm.h"

namespace rlforge {

namespace fs = std::filesystem;

namespace {

constexpr char kFormat[] = "rlforge-job-checkpoint-v1";
constexpr char kManifest[] = "manifest.json";

// (step, step_<N> folder) of every checkpoints/step_<N>, newest first; none when checkpoints/
// cannot be listed.
std::vector<std::pair<int64_t, std::string>> StepFolders(FileSystem& files,
                                                         const std::string& run_dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  const std::string root = run_dir + "/checkpoints";
  auto names = files.ListDirectory(root);
  if (!names.ok()) return out;
  for (const std::string& name : *names) {
    int64_t step = 0;
    if (name.rfind("step_", 0) != 0 || !absl::SimpleAtoi(name.substr(5), &step)) continue;
    out.emplace_back(step, root + "/" + name);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

// Every file under `dir` (relative path -> size), recursively, but the manifest (and its
// temporary file).
absl::Status ListFiles(FileSystem& files, const std::string& dir, const std::string& prefix,
                       std::map<std::string, uint64_t>* out) {
  ASSIGN_OR_RETURN(const std::vector<std::string> names, files.ListDirectory(dir));
  for (const std::string& name : names) {
    const std::string rel = prefix + name;
    if (absl::StartsWith(rel, kManifest)) continue;
    ASSIGN_OR_RETURN(const FileStat st, files.Stat(dir + "/" + name));
    if (st.is_directory) {
      RETURN_IF_ERROR(ListFiles(files, dir + "/" + name, rel + "/", out));
    } else {
      (*out)[rel] = st.size;
    }
  }
  return absl::OkStatus();
}

// DataLoss unless every file the manifest lists is in `state_dir` with its size (a manifest
// written before sizes were recorded lists none).
absl::Status CheckFiles(FileSystem& files, const std::string& state_dir,
                        const nlohmann::json& manifest) {
  if (!manifest.contains("files") || !manifest["files"].is_object()) return absl::OkStatus();
  for (const auto& [rel, size] : manifest["files"].items()) {
    auto st = files.Stat(state_dir + "/" + rel);
    if (absl::IsNotFound(st.status())) {
      return absl::DataLossError(
          absl::StrCat("checkpoint ", state_dir, ": ", rel, " is missing (the manifest lists it)"));
    }
    if (!st.ok()) return st.status();
    if (!size.is_number_unsigned() || st->size != size.get<uint64_t>()) {
      return absl::DataLossError(absl::StrCat("checkpoint ", state_dir, ": ", rel, " holds ",
                                              st->size, " bytes; the manifest says ", size.dump()));
    }
  }
  return absl::OkStatus();
}

// The checkpoint in `state_dir`, or why it is not a complete one: NotFound or DataLoss when it
// is incomplete or torn, another code when the file system failed to tell.
absl::StatusOr<JobCheckpoint> ReadCheckpoint(FileSystem& files, const std::string& state_dir,
                                             int64_t step) {
  const std::string manifest = state_dir + "/" + kManifest;
  if (absl::IsNotFound(files.Stat(manifest).status())) {
    return absl::NotFoundError(
        absl::StrCat("checkpoint ", state_dir,
                     " is incomplete (no manifest.json: the job was stopped while writing it)"));
  }
  ASSIGN_OR_RETURN(std::string text, files.ReadFile(manifest));
  nlohmann::json m = nlohmann::json::parse(text, nullptr, false);
  if (m.is_discarded() || !m.is_object() || m.value("format", "") != kFormat ||
      m.value("step", int64_t{-1}) != step) {
    return absl::DataLossError(absl::StrCat("checkpoint ", state_dir, ": manifest.json is not a ",
                                            kFormat, " manifest of step ", step));
  }
  RETURN_IF_ERROR(CheckFiles(files, state_dir, m));
  ASSIGN_OR_RETURN(std::string ctl, files.ReadFile(state_dir + "/controller.json"));
  JobCheckpoint c;
  c.step = step;
  c.dir = state_dir;
  c.controller = nlohmann::json::parse(ctl, nullptr, false);
  if (c.controller.is_discarded()) {
    return absl::DataLossError(
        absl::StrCat("checkpoint ", state_dir, ": controller.json does not parse"));
  }
  return c;
}

bool IsTorn(const absl::Status& s) { return absl::IsNotFound(s) || absl::IsDataLoss(s); }

// The manifest goes first, so a deletion cut short leaves an incomplete checkpoint, never one
// that reads as complete with files missing.
absl::Status RemoveCheckpoint(FileSystem& files, const std::string& state_dir) {
  const absl::Status s = files.Remove(state_dir + "/" + kManifest);
  if (!s.ok() && !absl::IsNotFound(s)) return s;
  return files.RemoveTree(state_dir);
}

// Deletes complete checkpoints past the newest `keep`, and incomplete ones older than the
// newest complete one (a later save of the same step would replace them anyway). One the file
// system cannot read is left alone.
void Prune(FileSystem& files, const std::string& run_dir, int64_t keep) {
  int64_t complete = 0;
  for (const auto& [step, folder] : StepFolders(files, run_dir)) {
    const std::string state = folder + "/state";
    if (!files.Exists(state)) continue;
    const absl::Status read = ReadCheckpoint(files, state, step).status();
    if (!read.ok() && !IsTorn(read)) {
      spdlog::warn("checkpoint {} left alone: {}", state, Msg(read));
      continue;
    }
    if (read.ok() && ++complete <= keep) continue;
    if (!read.ok() && complete == 0) continue;  // newer than every complete one: a save under way
    if (const absl::Status s = RemoveCheckpoint(files, state); !s.ok()) {
      spdlog::warn("cannot delete old checkpoint {}: {}", state, Msg(s));
      continue;
    }
    auto rest = files.ListDirectory(folder);
    if (rest.ok() && rest->empty()) files.Remove(folder).IgnoreError();
  }
}

// Everything SaveJobCheckpoint does but the clean-up of a failure.
absl::Status WriteJobCheckpoint(
    const RunDirectory& run, const std::string& dir, int64_t step, const std::string& algorithm,
    const nlohmann::json& controller, int64_t keep,
    const std::function<absl::Status(const std::string& state_dir)>& save_actors) {
  FileSystem& files = run.fs();
  RETURN_IF_ERROR(RemoveCheckpoint(files, dir));  // a torn save of this step by a killed run
  RETURN_IF_ERROR(files.CreateDirectories(dir));
  // The new folders' names reach the disk before anything in them counts.
  RETURN_IF_ERROR(files.SyncDirectory(run.path() + "/checkpoints"));
  RETURN_IF_ERROR(SyncParentDirectory(files, dir));
  RETURN_IF_ERROR(save_actors(dir));
  return CommitCheckpoint(dir, step, algorithm, controller, keep, files);
}

}  // namespace

std::string CheckpointStateDir(const std::string& run_dir, int64_t step) {
  return (fs::path(run_dir) / "checkpoints" / absl::StrCat("step_", step) / "state").string();
}

absl::Status CommitCheckpoint(const std::string& state_dir, int64_t step,
                              const std::string& algorithm, const nlohmann::json& controller,
                              int64_t keep, FileSystem& files) {
  RETURN_IF_ERROR(
      WriteFileAtomic(files, state_dir + "/controller.json", controller.dump(1) + "\n"));
  std::map<std::string, uint64_t> sizes;
  RETURN_IF_ERROR(ListFiles(files, state_dir, "", &sizes));
  ASSIGN_OR_RETURN(const std::vector<std::string> names, files.ListDirectory(state_dir));
  std::vector<std::string> entries;
  for (const std::string& name : names) {
    if (!absl::StartsWith(name, kManifest)) entries.push_back(name);
  }
  // The actors' folders were made in state_dir: their names must be durable too.
  RETURN_IF_ERROR(files.SyncDirectory(state_dir));
  nlohmann::json m{{"format", kFormat},
                   {"step", step},
                   {"algorithm", algorithm},
                   {"entries", entries},
                   {"files", sizes}};
  RETURN_IF_ERROR(WriteFileAtomic(files, state_dir + "/" + kManifest, m.dump(1) + "\n"));
  // The run directory is the parent of checkpoints/; prune from there.
  Prune(files, fs::path(state_dir).parent_path().parent_path().parent_path().string(), keep);
  return absl::OkStatus();
}

absl::Status SaveJobCheckpoint(
    const RunDirectory& run, int64_t step, const std::string& algorithm,
    const nlohmann::json& controller, int64_t keep,
    const std::function<absl::Status(const std::string& state_dir)>& save_actors) {
  const std::string dir = CheckpointStateDir(run.path(), step);
  const absl::Status s =
      WriteJobCheckpoint(run, dir, step, algorithm, controller, keep, save_actors);
  if (s.ok()) return s;
  RemoveCheckpoint(run.fs(), dir).IgnoreError();  // may fail as the save did; a resume skips it
  return Annotate(s, absl::StrCat("checkpoint ", dir));
}

absl::StatusOr<std::optional<JobCheckpoint>> FindNewestCheckpoint(const std::string& run_dir,
                                                                  std::vector<std::string>* skipped,
                                                                  FileSystem& files) {
  for (const auto& [step, folder] : StepFolders(files, run_dir)) {
    const std::string state = folder + "/state";
    if (!files.Exists(state)) continue;  // a Hugging Face export alone
    auto c = ReadCheckpoint(files, state, step);
    if (c.ok()) return std::optional<JobCheckpoint>(std::move(*c));
    skipped->push_back(std::string(c.status().message()));
  }
  return std::optional<JobCheckpoint>();
}

absl::Status TruncateMetrics(const std::string& path, int64_t step, FileSystem& files) {
  auto st = files.Stat(path);
  if (absl::IsNotFound(st.status())) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::string text, files.ReadFile(path));
  std::istringstream in(text);
  std::string line, kept;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("step")) continue;  // cut by a kill
    if (j["step"].get<int64_t>() <= step) kept += line + "\n";
  }
  return WriteFileAtomic(files, path, kept);
}

absl::Status CheckpointAfterIteration(
    JobContext& ctx, int64_t step, const nlohmann::json& controller_state,
    const std::function<absl::Status(const std::string& state_dir)>& save_actors) {
  const CheckpointOptions& o = ctx.config().checkpoint;
  if (o.every <= 0) return absl::OkStatus();
  const int stop = ctx.StopSignal();
  if (step % o.every != 0 && stop == 0) return absl::OkStatus();
  RETURN_IF_ERROR(SaveJobCheckpoint(ctx.run_dir(), step, ctx.config().job.algorithm->name,
                                    controller_state, o.keep, save_actors));
  const std::string dir = CheckpointStateDir(ctx.run_dir().path(), step);
  spdlog::info("checkpoint {} complete", dir);
  if (stop != 0) {
    return absl::CancelledError(absl::StrCat("interrupted by signal ", stop, " (", strsignal(stop),
                                             ") after iteration ", step, "; checkpoint ", dir,
                                             " written: continue with rlforge run --resume ",
                                             ctx.run_dir().path()));
  }
  return absl::OkStatus();
}

}  // namespace rlforge
