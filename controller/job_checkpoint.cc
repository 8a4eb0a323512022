#include "controller/job_checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/logging.h"
#include "common/status.h"
#include "controller/algorithm.h"

namespace rlforge {

namespace fs = std::filesystem;

namespace {

constexpr char kFormat[] = "rlforge-job-checkpoint-v1";

// (step, step_<N> folder) of every checkpoints/step_<N>, newest first.
std::vector<std::pair<int64_t, fs::path>> StepFolders(const std::string& run_dir) {
  std::vector<std::pair<int64_t, fs::path>> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(run_dir) / "checkpoints", ec)) {
    const std::string name = e.path().filename().string();
    int64_t step = 0;
    if (name.rfind("step_", 0) != 0 || !absl::SimpleAtoi(name.substr(5), &step)) continue;
    out.emplace_back(step, e.path());
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

// The checkpoint in `state_dir`, or why it is not a complete one.
absl::StatusOr<JobCheckpoint> ReadCheckpoint(const fs::path& state_dir, int64_t step) {
  const fs::path manifest = state_dir / "manifest.json";
  if (!fs::exists(manifest)) {
    return absl::NotFoundError(
        absl::StrCat("checkpoint ", state_dir.string(),
                     " is incomplete (no manifest.json: the job was stopped while writing it)"));
  }
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(manifest.string()));
  nlohmann::json m = nlohmann::json::parse(text, nullptr, false);
  if (m.is_discarded() || !m.is_object() || m.value("format", "") != kFormat ||
      m.value("step", int64_t{-1}) != step) {
    return absl::DataLossError(absl::StrCat("checkpoint ", state_dir.string(),
                                            ": manifest.json is not a ", kFormat,
                                            " manifest of step ", step));
  }
  ASSIGN_OR_RETURN(std::string ctl, ReadFileToString((state_dir / "controller.json").string()));
  JobCheckpoint c;
  c.step = step;
  c.dir = state_dir.string();
  c.controller = nlohmann::json::parse(ctl, nullptr, false);
  if (c.controller.is_discarded()) {
    return absl::DataLossError(
        absl::StrCat("checkpoint ", state_dir.string(), ": controller.json does not parse"));
  }
  return c;
}

// Deletes complete checkpoints past the newest `keep`, and incomplete ones older than the
// newest complete one (a later save of the same step would replace them anyway).
void Prune(const std::string& run_dir, int64_t keep) {
  int64_t complete = 0;
  for (const auto& [step, folder] : StepFolders(run_dir)) {
    const fs::path state = folder / "state";
    if (!fs::exists(state)) continue;
    const bool ok = fs::exists(state / "manifest.json");
    if (ok && ++complete <= keep) continue;
    if (!ok && complete == 0) continue;  // newer than every complete one: a save under way
    std::error_code ec;
    fs::remove_all(state, ec);
    if (ec) {
      spdlog::warn("cannot delete old checkpoint {}: {}", state.string(), ec.message());
      continue;
    }
    if (fs::is_empty(folder, ec)) fs::remove(folder, ec);
  }
}

}  // namespace

std::string CheckpointStateDir(const std::string& run_dir, int64_t step) {
  return (fs::path(run_dir) / "checkpoints" / absl::StrCat("step_", step) / "state").string();
}

absl::Status CommitCheckpoint(const std::string& state_dir, int64_t step,
                              const std::string& algorithm, const nlohmann::json& controller,
                              int64_t keep) {
  const fs::path dir(state_dir);
  RETURN_IF_ERROR(WriteFileAtomic((dir / "controller.json").string(), controller.dump(1) + "\n"));
  std::vector<std::string> entries;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    entries.push_back(e.path().filename().string());
  }
  std::sort(entries.begin(), entries.end());
  nlohmann::json m{
      {"format", kFormat}, {"step", step}, {"algorithm", algorithm}, {"entries", entries}};
  RETURN_IF_ERROR(WriteFileAtomic((dir / "manifest.json").string(), m.dump(1) + "\n"));
  // The run directory is the parent of checkpoints/; prune from there.
  Prune(dir.parent_path().parent_path().parent_path().string(), keep);
  return absl::OkStatus();
}

absl::StatusOr<std::optional<JobCheckpoint>> FindNewestCheckpoint(
    const std::string& run_dir, std::vector<std::string>* skipped) {
  for (const auto& [step, folder] : StepFolders(run_dir)) {
    const fs::path state = folder / "state";
    if (!fs::exists(state)) continue;  // a Hugging Face export alone
    auto c = ReadCheckpoint(state, step);
    if (c.ok()) return std::optional<JobCheckpoint>(std::move(*c));
    skipped->push_back(std::string(c.status().message()));
  }
  return std::optional<JobCheckpoint>();
}

absl::Status TruncateMetrics(const std::string& path, int64_t step) {
  if (!fs::exists(path)) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  std::istringstream in(text);
  std::string line, kept;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("step")) continue;  // cut by a kill
    if (j["step"].get<int64_t>() <= step) kept += line + "\n";
  }
  return WriteFileAtomic(path, kept);
}

absl::Status CheckpointAfterIteration(
    JobContext& ctx, int64_t step, const nlohmann::json& controller_state,
    const std::function<absl::Status(const std::string& state_dir)>& save_actors) {
  const CheckpointOptions& o = ctx.config().checkpoint;
  if (o.every <= 0) return absl::OkStatus();
  const int stop = ctx.StopSignal();
  if (step % o.every != 0 && stop == 0) return absl::OkStatus();
  const std::string dir = CheckpointStateDir(ctx.run_dir().path(), step);
  std::error_code ec;
  fs::remove_all(dir, ec);  // a torn save of this step by an earlier, killed run
  fs::create_directories(dir, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  RETURN_IF_ERROR(Annotate(save_actors(dir), absl::StrCat("checkpoint ", dir)));
  RETURN_IF_ERROR(
      CommitCheckpoint(dir, step, ctx.config().job.algorithm->name, controller_state, o.keep));
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
