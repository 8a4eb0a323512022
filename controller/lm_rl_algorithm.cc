#include "controller/lm_rl_algorithm.h"

#include <chrono>
#include <cmath>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/timing_keys.h"
#include "controller/lm_loop.h"
#include "controller/trainer_group.h"

namespace rlforge {

namespace {

double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

}  // namespace

absl::StatusOr<std::unique_ptr<Algorithm>> LmRlAlgorithm::Create(const JobConfig& config) {
  RETURN_IF_ERROR(CheckStartCheckpoint(config));
  return std::unique_ptr<Algorithm>(new LmRlAlgorithm(config));
}

std::vector<RoleRequirement> LmRlAlgorithm::Roles() const { return LmRoles(config_); }

absl::Status LmRlAlgorithm::Run(JobContext& ctx) {
  Controller& ctl = ctx.controller();
  ASSIGN_OR_RETURN(TrainerGroup trainer, TrainerGroup::Create(ctl));
  const GrpoOptions& g = config_.grpo;
  ASSIGN_OR_RETURN(TaskText text, LoadTaskText(config_, g.eval_examples));
  LmLoop loop(ctx, text);
  const int64_t iterations = config_.job.iterations;
  ctx.SetTotalIterations(iterations);
  const uint64_t seed = static_cast<uint64_t>(config_.job.seed);
  int64_t version = 0;
  spdlog::info("{}: {} prompts x {} samples per iteration, {} iterations, {} held-out prompts",
               config_.job.algorithm->name, g.prompts_per_iteration, g.group_size, iterations,
               text.heldout.size());

  int64_t first = 1;
  if (const JobCheckpoint* from = ctx.resume_point()) {
    ASSIGN_OR_RETURN(version, Resume(trainer, loop, *from));
    first = from->step + 1;
  } else {  // step 0: the starting policy
    RETURN_IF_ERROR(loop.EvaluateStart(g.max_new_tokens, seed, g.eval_verifier));
  }
  SamplingParams sampling;
  sampling.n = g.group_size;
  sampling.temperature = g.temperature;
  sampling.top_p = g.top_p;
  sampling.top_k = g.top_k;
  sampling.max_tokens = g.max_new_tokens;
  sampling.stream_groups = g.stream_groups;
  for (int64_t it = first; it <= iterations; ++it) {
    const Stopwatch t_iter;
    IterationRecord rec;
    rec.step = it;
    const uint64_t offset = static_cast<uint64_t>((it - 1) * g.prompts_per_iteration);
    std::vector<PromptExample> batch = text.TrainBatch(seed, offset, g.prompts_per_iteration);
    sampling.seed = seed * 1000003ull + it;
    ASSIGN_OR_RETURN(Scored s, loop.GenerateAndScore(batch, sampling));
    const double samples = static_cast<double>(batch.size() * g.group_size);
    RewardStats(s, samples, rec.metrics, "");
    double response_tokens = 0, stopped = 0;
    int64_t lag = 0;
    std::vector<SampleRecord> shown;
    for (size_t i = 0; i < s.groups.size(); ++i) {
      for (size_t j = 0; j < s.groups[i].samples.size(); ++j) {
        const LmSample& smp = s.groups[i].samples[j];
        response_tokens += static_cast<double>(smp.tokens.size());
        stopped += smp.stopped ? 1 : 0;
        for (int64_t v : smp.versions) lag = std::max(lag, version - v);
        if (i < 2 && j < 2) {
          shown.push_back(
              {it, s.examples[i].prompt, text.Response(smp), s.rewards[i * g.group_size + j]});
        }
      }
    }
    ctx.AddSamples(shown);
    rec.metrics["reward_mean"] = Mean(s.rewards);
    rec.metrics["response_length"] = response_tokens / samples;
    rec.metrics["stopped_fraction"] = stopped / samples;
    rec.metrics["policy_version_lag"] = static_cast<double>(lag);
    rec.metrics["engine_preemptions"] = s.metrics["engine_preemptions"];
    for (const auto& [k, v] : s.timings) rec.timings[k] = v;
    for (const auto& [k, v] : s.metrics) {
      // Per engine: version, groups; and the work dealt again after a worker was lost.
      if (absl::StartsWith(k, "rollout/") || absl::StartsWith(k, "faults/")) rec.metrics[k] = v;
    }
    rec.timings["generate_tokens_per_s"] = s.metrics["generated_tokens"] / s.timings["generate_s"];

    // Train.
    const Stopwatch t_train;
    std::vector<TensorFrame> frames = GroupsToFrames(s.groups, true);
    std::vector<float> rewards(s.rewards.begin(), s.rewards.end());
    frames.push_back(TensorFrame::FromVector("rewards", rewards));
    proto::WorkRequest train;
    train.mutable_grpo_train()->set_group_size(g.group_size);
    train.mutable_grpo_train()->set_step(it);
    ASSIGN_OR_RETURN(WorkOutcome trained, trainer.Run(std::move(train), std::move(frames)));
    SplitTimingsFromMetrics(trained.result.metrics(), rec.timings, rec.metrics);
    rec.timings["train_s"] = t_train.Seconds();

    // Weight sync.
    const Stopwatch t_sync;
    RETURN_IF_ERROR(
        loop.SyncWeights(trainer, trained.result.weights(), std::move(trained.tensors), rec));
    version = trained.result.weights().version();
    rec.timings["weight_sync_s"] = t_sync.Seconds();
    rec.metrics["policy_version"] = static_cast<double>(version);

    if (it == iterations || (g.eval_every > 0 && it % g.eval_every == 0)) {
      RETURN_IF_ERROR(loop.Evaluate(g.max_new_tokens, seed, g.eval_verifier, rec));
    }
    if (it == iterations) {  // the final policy, for `rlforge eval` and later stages
      proto::WorkRequest save;
      const std::string dir = absl::StrCat(ctx.run_dir().path(), "/checkpoints/step_", it);
      save.mutable_lm_save()->set_dir(dir);
      ASSIGN_OR_RETURN(WorkOutcome saved, trainer.Run(std::move(save)));
      SplitTimingsFromMetrics(saved.result.metrics(), rec.timings, rec.metrics);
      spdlog::info("checkpoint {}", dir);
    }
    rec.timings["iteration_s"] = t_iter.Seconds();
    const double stages = rec.timings["rollout_wall_s"] + rec.timings["train_s"] +
                          rec.timings["weight_sync_s"] + rec.timings["eval_s"];
    rec.timings["controller_share"] =
        std::max(0.0, rec.timings["iteration_s"] - stages) / rec.timings["iteration_s"];
    rec.timings["samples_per_s"] = samples / rec.timings["iteration_s"];
    rec.timings["tokens_per_s"] = response_tokens / rec.timings["iteration_s"];
    RETURN_IF_ERROR(ctx.EndIteration(rec));
    RETURN_IF_ERROR(CheckpointAfterIteration(
        ctx, it, {{"iteration", it}, {"policy_version", version}}, [&](const std::string& dir) {
          proto::WorkRequest save;
          save.mutable_save_state()->set_dir(dir + "/trainer");
          return trainer.Run(std::move(save)).status();
        }));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> LmRlAlgorithm::Resume(TrainerGroup& trainer, LmLoop& loop,
                                              const JobCheckpoint& from) {
  const nlohmann::json& c = from.controller;
  if (!c.contains("iteration") || !c.contains("policy_version") ||
      c["iteration"].get<int64_t>() != from.step) {
    return absl::DataLossError(absl::StrCat(from.dir, "/controller.json: no iteration ", from.step,
                                            " and policy_version"));
  }
  const int64_t version = c["policy_version"].get<int64_t>();
  proto::WorkRequest load;
  load.mutable_load_state()->set_dir(from.dir + "/trainer");
  ASSIGN_OR_RETURN(WorkOutcome restored, trainer.Run(std::move(load)));
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

}  // namespace rlforge
