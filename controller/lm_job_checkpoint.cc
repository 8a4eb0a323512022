// Whole-job checkpoints of the loops that drive a language-model policy, and the check of
// the starting checkpoint (lm_loop.h).
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "controller/lm_loop.h"

namespace rlforge {

absl::Status CheckpointLmJob(JobContext& ctx, TrainerGroup& trainer, int64_t it, int64_t version,
                             const nlohmann::json& rollout) {
  nlohmann::json state = {{"iteration", it}, {"policy_version", version}};
  if (!rollout.is_null()) state["rollout"] = rollout;
  return CheckpointAfterIteration(ctx, it, state,
                                  [&](const std::string& dir) { return trainer.SaveState(dir); });
}

absl::StatusOr<int64_t> ResumeLmJob(TrainerGroup& trainer, LmLoop& loop,
                                    const JobCheckpoint& from) {
  const nlohmann::json& c = from.controller;
  if (!c.contains("iteration") || !c.contains("policy_version") ||
      c["iteration"].get<int64_t>() != from.step) {
    return absl::DataLossError(absl::StrCat(from.dir, "/controller.json: no iteration ", from.step,
                                            " and policy_version"));
  }
  const int64_t version = c["policy_version"].get<int64_t>();
  ASSIGN_OR_RETURN(WorkOutcome restored, trainer.LoadState(from.dir));
  if (restored.result.weights().version() != version) {
    return absl::DataLossError(absl::StrCat(from.dir, ": the trainer restored policy version ",
                                            restored.result.weights().version(),
                                            ", controller.json says ", version));
  }
  IterationRecord unused;  // the sync's figures belong to no iteration
  RETURN_IF_ERROR(
      loop.SyncWeights(trainer, restored.result.weights(), std::move(restored.tensors), unused));
  spdlog::info("resumed after iteration {} at policy version {}", from.step, version);
  return version;
}

absl::Status CheckStartCheckpoint(const JobConfig& c) {
  if (c.model.path.empty() || !std::filesystem::is_directory(c.model.path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.path: '", c.model.path,
                     "' is not a checkpoint directory; job.algorithm ", c.job.algorithm->name,
                     " starts from one (e.g. the SFT stage's runs/<name>/checkpoints/step_<N>;",
                     " set model.init_job to train it first)"));
  }
  return absl::OkStatus();
}

}  // namespace rlforge
