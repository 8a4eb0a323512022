// Whole-job checkpoints: where they live, when one counts as complete, and which one a resumed
// job starts from (docs/checkpoints.md).
//
// iteration N ends -> the loop's stateful actors write state/<actor>/ (SaveState) ->
//   controller.json (the loop's counters) -> manifest.json, written last, listing every file
//   and its size -> older complete checkpoints past checkpoint.keep deleted (manifest first)
// rlforge run --resume -> newest step_<N>/state whose manifest is valid and whose files are
//   all there at their sizes (a torn one, killed or failed while writing, is skipped with a
//   message naming it) -> metrics.jsonl cut back to step N -> the loop restores its actors
//   (LoadState) and continues at N + 1
//
// Layout: runs/<name>/checkpoints/step_<N>/state/{manifest.json, controller.json, <actor>/}.
// step_<N>/ may also hold a Hugging Face export of the policy (LmSave), left alone here.
// A save that fails (ENOSPC, EIO, an actor's error) leaves every earlier checkpoint whole: it
// returns the error naming the file, the operation and errno's text, and nothing older is
// deleted until a newer checkpoint is complete. Every file operation goes through the run
// directory's FileSystem. Everything runs on the controller's loop thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/file_system.h"
#include "nlohmann/json.hpp"

namespace rlforge {

class JobContext;
class RunDirectory;

// A complete checkpoint, as a resumed job reads it.
struct JobCheckpoint {
  int64_t step = 0;           // the last iteration it holds
  std::string dir;            // .../checkpoints/step_<N>/state
  nlohmann::json controller;  // what the loop saved (controller.json)
};

// <run_dir>/checkpoints/step_<step>/state
std::string CheckpointStateDir(const std::string& run_dir, int64_t step);

// Writes controller.json and then manifest.json into `state_dir` (which already holds the
// actors' files), then deletes the complete checkpoints older than the newest `keep` (their
// state/ folder; step_<N>/ too when nothing else is in it). A failed deletion only warns.
absl::Status CommitCheckpoint(const std::string& state_dir, int64_t step,
                              const std::string& algorithm, const nlohmann::json& controller,
                              int64_t keep, FileSystem& fs = FileSystem::Default());

// One whole save of step `step` into `run`: removes a torn save of the same step, makes the
// state folder, calls save_actors(state_dir) (the actors write their folders) and commits
// `controller`. On failure the partial folder is removed (best effort; a resume skips it
// anyway) and the error says "checkpoint <state_dir>: " and what failed.
absl::Status SaveJobCheckpoint(
    const RunDirectory& run, int64_t step, const std::string& algorithm,
    const nlohmann::json& controller, int64_t keep,
    const std::function<absl::Status(const std::string& state_dir)>& save_actors);

// The newest complete checkpoint of a run directory, or nullopt when it has none. Each
// checkpoint passed over because it is incomplete or unreadable adds a line to `skipped`.
absl::StatusOr<std::optional<JobCheckpoint>> FindNewestCheckpoint(
    const std::string& run_dir, std::vector<std::string>* skipped,
    FileSystem& fs = FileSystem::Default());

// Keeps the records of metrics.jsonl whose step is at most `step` (a line cut by a kill is
// dropped too); rewrites the file atomically. A missing file is fine.
absl::Status TruncateMetrics(const std::string& path, int64_t step,
                             FileSystem& fs = FileSystem::Default());

// Called by a loop after ctx.EndIteration(step): when checkpoint.every divides `step`, or a
// stop was requested (Ctrl-C with checkpoints on), saves the job (SaveJobCheckpoint into
// ctx.run_dir(); save_actors sends every stateful actor its SaveState and waits). Then, when
// a stop was requested, returns Cancelled.
absl::Status CheckpointAfterIteration(
    JobContext& ctx, int64_t step, const nlohmann::json& controller_state,
    const std::function<absl::Status(const std::string& state_dir)>& save_actors);

}  // namespace rlforge
