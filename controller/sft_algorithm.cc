#include "controller/sft_algorithm.h"

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/timing_keys.h"
#include "controller/trainer_group.h"

namespace rlforge {

namespace {

void Record(const WorkOutcome& o, IterationRecord& rec) {
  SplitTimingsFromMetrics(o.result.metrics(), rec.timings, rec.metrics);
}

// A resumed job: the trainer ranks read their state from the checkpoint; their optimiser step
// count must be controller.json's. Returns it.
absl::StatusOr<int64_t> Resume(TrainerGroup& trainer, const JobCheckpoint& from) {
  const nlohmann::json& c = from.controller;
  if (!c.contains("iteration") || !c.contains("optimizer_step") ||
      c["iteration"].get<int64_t>() != from.step) {
    return absl::DataLossError(absl::StrCat(from.dir, "/controller.json: no iteration ", from.step,
                                            " and optimizer_step"));
  }
  const int64_t step = c["optimizer_step"].get<int64_t>();
  ASSIGN_OR_RETURN(WorkOutcome restored, trainer.LoadState(from.dir));
  const auto& m = restored.result.metrics();
  const auto it = m.find("optimizer_step");
  if (it == m.end() || static_cast<int64_t>(it->second) != step) {
    return absl::DataLossError(absl::StrCat(from.dir, ": the trainer restored optimizer step ",
                                            it == m.end() ? -1 : static_cast<int64_t>(it->second),
                                            ", controller.json says ", step));
  }
  spdlog::info("resumed after iteration {} at optimizer step {}", from.step, step);
  return step;
}

}  // namespace

absl::Status SftAlgorithm::Run(JobContext& ctx) {
  Controller& c = ctx.controller();
  ASSIGN_OR_RETURN(TrainerGroup trainer, TrainerGroup::Create(c));
  const SftOptions& s = config_.sft;
  const int64_t iterations = (s.steps + s.steps_per_iteration - 1) / s.steps_per_iteration;
  ctx.SetTotalIterations(iterations);

  proto::WorkRequest init;
  init.mutable_sft_init();
  ASSIGN_OR_RETURN(WorkOutcome ready, trainer.Run(std::move(init)));
  const auto& im = ready.result.metrics();
  spdlog::info("SFT: {:.0f} parameters, vocab {:.0f}, {:.0f} packed rows per epoch, {} steps",
               im.count("parameters") ? im.at("parameters") : 0.0,
               im.count("vocab_size") ? im.at("vocab_size") : 0.0,
               im.count("train_rows") ? im.at("train_rows") : 0.0, s.steps);

  int64_t step = 0, first = 1;
  if (const JobCheckpoint* from = ctx.resume_point()) {
    ASSIGN_OR_RETURN(step, Resume(trainer, *from));
    first = from->step + 1;
  }
  for (int64_t it = first; it <= iterations; ++it) {
    const Stopwatch t_iter;
    IterationRecord rec;
    rec.step = it;
    const int64_t n = std::min(s.steps_per_iteration, s.steps - step);
    proto::WorkRequest train;
    train.mutable_sft_train()->set_first_step(step);
    train.mutable_sft_train()->set_num_steps(n);
    train.mutable_sft_train()->set_total_steps(s.steps);
    ASSIGN_OR_RETURN(WorkOutcome trained, trainer.Run(std::move(train)));
    Record(trained, rec);
    step += n;
    rec.metrics["optimizer_step"] = static_cast<double>(step);
    const bool last = step >= s.steps;

    if (last || (s.eval_every > 0 && step % s.eval_every == 0)) {
      proto::WorkRequest eval;
      eval.mutable_lm_evaluate()->set_max_examples(config_.data.heldout_examples);
      ASSIGN_OR_RETURN(WorkOutcome scored, trainer.Run(std::move(eval)));
      Record(scored, rec);
    }
    if (last || (s.save_every > 0 && step % s.save_every == 0)) {
      proto::WorkRequest save;
      std::string dir = absl::StrCat(ctx.run_dir().path(), "/checkpoints/step_", step);
      save.mutable_lm_save()->set_dir(dir);
      ASSIGN_OR_RETURN(WorkOutcome saved, trainer.Run(std::move(save)));
      Record(saved, rec);
      spdlog::info("checkpoint {}", dir);
    }
    rec.timings["iteration_s"] = t_iter.Seconds();
    RETURN_IF_ERROR(ctx.EndIteration(rec));
    RETURN_IF_ERROR(
        CheckpointAfterIteration(ctx, it, {{"iteration", it}, {"optimizer_step", step}},
                                 [&](const std::string& dir) { return trainer.SaveState(dir); }));
  }
  return absl::OkStatus();
}

}  // namespace rlforge
