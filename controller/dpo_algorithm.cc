#include "controller/dpo_algorithm.h"

#include <chrono>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/timing_keys.h"
#include "controller/lm_loop.h"
#include "controller/trainer_group.h"

namespace rlforge {

namespace {

// Iteration `it`'s pairs: from dpo.pairs_per_iteration consecutive train problems (chosen: the
// true answer; rejected: carries dropped when dpo.rejected is carryless and that differs, else
// a near miss), or from the preference file. `carryless` counts carry-dropped rejections.
std::vector<PreferenceExample> PreferenceBatch(const JobConfig& c, const TaskText& text,
                                               const ArithmeticTask* careless, int64_t it,
                                               double& carryless) {
  const DpoJobOptions& d = c.dpo;
  const uint64_t seed = static_cast<uint64_t>(c.job.seed);
  const uint64_t offset = static_cast<uint64_t>((it - 1) * d.pairs_per_iteration);
  std::vector<PreferenceExample> batch;
  for (int64_t k = 0; k < d.pairs_per_iteration; ++k) {
    const uint64_t index = offset + static_cast<uint64_t>(k);
    if (!text.task) {
      batch.push_back(text.preference_file[index % text.preference_file.size()]);
      continue;
    }
    const PromptExample ex = text.task->Example(seed, Split::kTrain, index);
    PreferenceExample pe{ex.prompt, text.task->ResponseFor(ex.answer), ""};
    if (d.rejected == DpoRejected::kCarryless)
      pe.rejected = careless->Example(seed, Split::kTrain, index).response;
    if (pe.rejected.empty() || pe.rejected == pe.chosen) {
      pe.rejected = text.task->ResponseFor(text.task->WrongAnswer(ex, seed * 7919 + index));
    } else {
      ++carryless;
    }
    batch.push_back(std::move(pe));
  }
  return batch;
}

// Each pair as a group of two stopped samples (chosen, rejected) for the trainer; the first
// two pairs into `shown` for the dashboard.
std::vector<LmGroup> PairsOf(const std::vector<PreferenceExample>& batch, const TaskText& text,
                             const std::string& system_prompt, int64_t it,
                             std::vector<SampleRecord>& shown) {
  std::vector<LmGroup> pairs(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    const PreferenceExample& ex = batch[i];
    pairs[i].request_id = static_cast<int64_t>(i);
    pairs[i].prompt = text.Encode(system_prompt, ex.prompt);
    for (const std::string& side : {ex.chosen, ex.rejected}) {
      LmSample s;
      s.tokens = text.EncodeResponse(side);
      s.logprobs.assign(s.tokens.size(), 0.0f);
      s.versions.assign(s.tokens.size(), -1);  // offline data: no policy produced it
      s.stopped = true;
      pairs[i].samples.push_back(std::move(s));
    }
    if (i < 2) {
      shown.push_back({it, ex.prompt, ex.chosen, 1.0});
      shown.push_back({it, ex.prompt, ex.rejected, 0.0});
    }
  }
  return pairs;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Algorithm>> DpoAlgorithm::Create(const JobConfig& config) {
  RETURN_IF_ERROR(CheckStartCheckpoint(config));
  return std::unique_ptr<Algorithm>(new DpoAlgorithm(config));
}

std::vector<RoleRequirement> DpoAlgorithm::Roles() const { return LmRoles(config_); }

absl::Status DpoAlgorithm::Run(JobContext& ctx) {
  Controller& ctl = ctx.controller();
  ASSIGN_OR_RETURN(TrainerGroup trainer, TrainerGroup::Create(ctl));
  const DpoJobOptions& d = config_.dpo;
  ASSIGN_OR_RETURN(TaskText text, LoadTaskText(config_, d.eval_examples));
  // Arithmetic: the same problem stream with every carry dropped from the responses is the
  // rejected side.
  std::optional<ArithmeticTask> careless_task;
  if (text.task) {
    ArithmeticOptions careless = text.task->options();
    careless.demo_carry_errors = 1;
    ASSIGN_OR_RETURN(careless_task, ArithmeticTask::Create(careless));
  }
  LmLoop loop(ctx, text);
  const int64_t iterations = config_.job.iterations;
  ctx.SetTotalIterations(iterations);
  const uint64_t seed = static_cast<uint64_t>(config_.job.seed);
  spdlog::info("dpo: {} pairs per iteration (rejected: {}), {} iterations, {} held-out prompts",
               d.pairs_per_iteration, ChoiceName(d.rejected), iterations, text.heldout.size());
  int64_t first = 1;
  if (const JobCheckpoint* from = ctx.resume_point()) {
    RETURN_IF_ERROR(ResumeLmJob(trainer, loop, *from).status());
    first = from->step + 1;
  } else {
    RETURN_IF_ERROR(loop.EvaluateStart(d.max_new_tokens, seed,
                                       AnswerCheck::kExact));  // step 0: the starting policy
  }
  for (int64_t it = first; it <= iterations; ++it) {
    const Stopwatch t_iter;
    IterationRecord rec;
    rec.step = it;
    double carryless = 0;
    const std::vector<PreferenceExample> batch =
        PreferenceBatch(config_, text, careless_task ? &*careless_task : nullptr, it, carryless);
    std::vector<SampleRecord> shown;
    const std::vector<LmGroup> pairs = PairsOf(batch, text, config_.data.system_prompt, it, shown);
    ctx.AddSamples(shown);
    if (text.task) {
      rec.metrics["carryless_rejected_fraction"] = carryless / static_cast<double>(batch.size());
    }

    const Stopwatch t_train;
    proto::WorkRequest train;
    train.mutable_dpo_train()->set_step(it);
    ASSIGN_OR_RETURN(WorkOutcome trained,
                     trainer.Run(std::move(train), GroupsToFrames(pairs, true)));
    SplitTimingsFromMetrics(trained.result.metrics(), rec.timings, rec.metrics);
    rec.timings["train_s"] = t_train.Seconds();
    const int64_t version = trained.result.weights().version();
    rec.metrics["policy_version"] = static_cast<double>(version);

    if (it == iterations || (d.eval_every > 0 && it % d.eval_every == 0)) {
      const Stopwatch t_sync;
      RETURN_IF_ERROR(
          loop.SyncWeights(trainer, trained.result.weights(), std::move(trained.tensors), rec));
      rec.timings["weight_sync_s"] = t_sync.Seconds();
      RETURN_IF_ERROR(loop.Evaluate(d.max_new_tokens, seed, AnswerCheck::kExact, rec));
    }
    rec.timings["iteration_s"] = t_iter.Seconds();
    rec.timings["pairs_per_s"] = static_cast<double>(batch.size()) / rec.timings["iteration_s"];
    RETURN_IF_ERROR(ctx.EndIteration(rec));
    RETURN_IF_ERROR(CheckpointLmJob(ctx, trainer, it, version));
  }
  return absl::OkStatus();
}

}  // namespace rlforge
