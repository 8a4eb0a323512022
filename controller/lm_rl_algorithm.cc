#include "controller/lm_rl_algorithm.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/timing_keys.h"
#include "controller/lm_loop.h"
#include "controller/rollout_dispatcher.h"
#include "controller/trainer_group.h"

namespace rlforge {

namespace {

double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

// The batch's statistics into rec: rewards, lengths, the per-token version lag (its largest
// and, as shares of the tokens, its histogram up to rollout.max_staleness), and a few samples
// for the dashboard. Returns the batch's response tokens.
double RecordBatch(const JobConfig& c, const TaskText& text, int64_t it, int64_t version,
                   const Scored& s, const std::vector<double>& lag_tokens, JobContext& ctx,
                   IterationRecord& rec) {
  const int64_t n = c.grpo.group_size;
  const double samples = static_cast<double>(s.groups.size() * n);
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
        shown.push_back({it, s.examples[i].prompt, text.Response(smp), s.rewards[i * n + j]});
      }
    }
  }
  ctx.AddSamples(shown);
  rec.metrics["reward_mean"] = Mean(s.rewards);
  rec.metrics["response_length"] = response_tokens / samples;
  rec.metrics["stopped_fraction"] = stopped / samples;
  rec.metrics["policy_version_lag"] = static_cast<double>(lag);
  rec.metrics["engine_preemptions"] =
      s.metrics.count("engine_preemptions") ? s.metrics.at("engine_preemptions") : 0.0;
  double all = 0;
  for (double t : lag_tokens) all += t;
  for (size_t d = 0; d < lag_tokens.size(); ++d) {
    rec.metrics[absl::StrCat("version_lag/", d)] = all > 0 ? lag_tokens[d] / all : 0;
  }
  return response_tokens;
}

// Samples whose tokens come from more than one policy version (rollout.partial).
int64_t PartialSamples(const Scored& s) {
  int64_t partial = 0;
  for (const LmGroup& g : s.groups) {
    for (const LmSample& smp : g.samples) {
      const auto [lo, hi] = std::minmax_element(smp.versions.begin(), smp.versions.end());
      partial += lo != smp.versions.end() && *lo != *hi ? 1 : 0;
    }
  }
  return partial;
}

// The trainer's GrpoTrain request for step `it` on s's groups.
absl::Status SubmitTrain(TrainerGroup& trainer, const Scored& s, int64_t group_size, int64_t it) {
  std::vector<TensorFrame> frames = GroupsToFrames(s.groups, true);
  std::vector<float> rewards(s.rewards.begin(), s.rewards.end());
  frames.push_back(TensorFrame::FromVector("rewards", rewards));
  proto::WorkRequest train;
  train.mutable_grpo_train()->set_group_size(group_size);
  train.mutable_grpo_train()->set_step(it);
  return trainer.Submit(std::move(train), std::move(frames));
}

// After step `it` trained: its metrics, the weight sync (engines then serve `version`), the
// evaluation every grpo.eval_every iterations (after `before_eval`, if given), the final
// checkpoint.
absl::Status AfterTrain(JobContext& ctx, const JobConfig& c, LmLoop& loop, TrainerGroup& trainer,
                        WorkOutcome trained, int64_t it, int64_t& version, IterationRecord& rec,
                        const std::function<absl::Status()>& before_eval = nullptr) {
  const GrpoOptions& g = c.grpo;
  SplitTimingsFromMetrics(trained.result.metrics(), rec.timings, rec.metrics);
  const Stopwatch t_sync;
  RETURN_IF_ERROR(
      loop.SyncWeights(trainer, trained.result.weights(), std::move(trained.tensors), rec));
  version = trained.result.weights().version();
  rec.timings["weight_sync_s"] = t_sync.Seconds();
  rec.metrics["policy_version"] = static_cast<double>(version);
  const uint64_t seed = static_cast<uint64_t>(c.job.seed);
  if (it == c.job.iterations || (g.eval_every > 0 && it % g.eval_every == 0)) {
    if (before_eval) RETURN_IF_ERROR(before_eval());
    RETURN_IF_ERROR(loop.Evaluate(g.max_new_tokens, seed, g.eval_verifier, rec));
  }
  if (it == c.job.iterations) {  // the final policy, for `rlforge eval` and later stages
    proto::WorkRequest save;
    const std::string dir = absl::StrCat(ctx.run_dir().path(), "/checkpoints/step_", it);
    save.mutable_lm_save()->set_dir(dir);
    ASSIGN_OR_RETURN(WorkOutcome saved, trainer.Run(std::move(save)));
    SplitTimingsFromMetrics(saved.result.metrics(), rec.timings, rec.metrics);
    spdlog::info("checkpoint {}", dir);
  }
  return absl::OkStatus();
}

// Rates and shares of the iteration: samples and tokens per second, the controller's own
// share, and how much of the iteration the trainer and the engines sat idle (engine idle: of
// engines x iteration seconds, those not spent generating training samples or loading).
void EndTimings(double iteration_s, double samples, double tokens, double engines,
                double engine_busy_s, IterationRecord& rec) {
  auto& t = rec.timings;
  t["iteration_s"] = iteration_s;
  const double stages = t["rollout_wall_s"] + t["train_s"] + t["weight_sync_s"] + t["eval_s"];
  t["controller_share"] = std::max(0.0, iteration_s - stages) / iteration_s;
  t["samples_per_s"] = samples / iteration_s;
  t["tokens_per_s"] = tokens / iteration_s;
  double load_s = 0;
  for (const auto& [k, v] : t) {
    if (absl::StartsWith(k, "rollout/") && absl::EndsWith(k, "/weight_load_s")) load_s += v;
  }
  t["trainer_idle_share"] = std::clamp(1.0 - t["train_s"] / iteration_s, 0.0, 1.0);
  t["engine_idle_share"] =
      std::clamp(1.0 - (engine_busy_s + load_s) / (engines * iteration_s), 0.0, 1.0);
}

SamplingParams TrainSampling(const GrpoOptions& g) {
  SamplingParams p;
  p.n = g.group_size;
  p.temperature = g.temperature;
  p.top_p = g.top_p;
  p.top_k = g.top_k;
  p.max_tokens = g.max_new_tokens;
  p.stream_groups = g.stream_groups;
  return p;
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
  ctx.SetTotalIterations(config_.job.iterations);
  spdlog::info(
      "{}: {} prompts x {} samples per iteration, {} iterations, {} held-out prompts, max "
      "staleness {}",
      config_.job.algorithm->name, g.prompts_per_iteration, g.group_size, config_.job.iterations,
      text.heldout.size(), config_.rollout.max_staleness);
  int64_t first = 1, version = 0;
  if (const JobCheckpoint* from = ctx.resume_point()) {
    ASSIGN_OR_RETURN(version, ResumeLmJob(trainer, loop, *from));
    first = from->step + 1;
  } else {
    RETURN_IF_ERROR(loop.EvaluateStart(g.max_new_tokens, static_cast<uint64_t>(config_.job.seed),
                                       g.eval_verifier));  // step 0: the starting policy
  }
  if (config_.rollout.max_staleness > 0) {
    return RunAsync(ctx, text, loop, trainer, first, version);
  }
  return RunSynchronous(ctx, text, loop, trainer, first, version);
}

absl::Status LmRlAlgorithm::RunSynchronous(JobContext& ctx, const TaskText& text, LmLoop& loop,
                                           TrainerGroup& trainer, int64_t first, int64_t version) {
  const GrpoOptions& g = config_.grpo;
  const uint64_t seed = static_cast<uint64_t>(config_.job.seed);
  SamplingParams sampling = TrainSampling(g);
  for (int64_t it = first; it <= config_.job.iterations; ++it) {
    const Stopwatch t_iter;
    IterationRecord rec;
    rec.step = it;
    const uint64_t offset = static_cast<uint64_t>((it - 1) * g.prompts_per_iteration);
    std::vector<PromptExample> batch = text.TrainBatch(seed, offset, g.prompts_per_iteration);
    sampling.seed = seed * 1000003ull + it;
    ASSIGN_OR_RETURN(Scored s, loop.GenerateAndScore(batch, sampling));
    std::vector<double> lag_tokens;
    if (AdmitFresh(version, 0, s, lag_tokens) != 0) {  // EngineFleet::CheckReply prevents it
      return absl::InternalError(absl::StrCat("iteration ", it, ": a sample lags policy version ",
                                              version, " (synchronous mode)"));
    }
    const double tokens = RecordBatch(config_, text, it, version, s, lag_tokens, ctx, rec);
    rec.metrics["stale_groups_discarded"] = 0;
    for (const auto& [k, v] : s.timings) rec.timings[k] = v;
    double engine_busy = 0;
    for (const auto& [k, v] : s.metrics) {
      // Per engine: version, groups; and the work dealt again after a worker was lost.
      if (absl::StartsWith(k, "rollout/") || absl::StartsWith(k, "faults/")) rec.metrics[k] = v;
    }
    for (const auto& [k, v] : s.timings) {
      if (absl::StartsWith(k, "rollout/") && absl::EndsWith(k, "/generate_s")) engine_busy += v;
    }
    rec.timings["generate_tokens_per_s"] = s.metrics["generated_tokens"] / s.timings["generate_s"];

    const Stopwatch t_train;
    RETURN_IF_ERROR(SubmitTrain(trainer, s, g.group_size, it));
    ASSIGN_OR_RETURN(WorkOutcome trained, trainer.Await());
    rec.timings["train_s"] = t_train.Seconds();
    RETURN_IF_ERROR(AfterTrain(ctx, config_, loop, trainer, std::move(trained), it, version, rec));
    EndTimings(t_iter.Seconds(), static_cast<double>(batch.size() * g.group_size), tokens,
               static_cast<double>(loop.fleet().size()), engine_busy, rec);
    RETURN_IF_ERROR(ctx.EndIteration(rec));
    RETURN_IF_ERROR(CheckpointLmJob(ctx, trainer, it, version));
  }
  return absl::OkStatus();
}

namespace {

// Batch b's request ids: run-wide, in dispatch order ((b - 1) x prompts + i).
std::vector<int64_t> BatchRequestIds(int64_t batch, int64_t prompts) {
  std::vector<int64_t> ids(static_cast<size_t>(prompts));
  for (int64_t i = 0; i < prompts; ++i) ids[static_cast<size_t>(i)] = (batch - 1) * prompts + i;
  return ids;
}

// Deals training batches dispatched + 1 .. min(last, job.iterations) to the engines.
absl::Status DispatchThrough(RolloutDispatcher& rollout, const TaskText& text, const JobConfig& c,
                             int64_t last, int64_t& dispatched) {
  const int64_t prompts = c.grpo.prompts_per_iteration;
  const uint64_t seed = static_cast<uint64_t>(c.job.seed);
  while (dispatched < std::min(last, c.job.iterations)) {
    ++dispatched;
    const uint64_t offset = static_cast<uint64_t>((dispatched - 1) * prompts);
    RETURN_IF_ERROR(rollout.Dispatch(dispatched, text.TrainBatch(seed, offset, prompts),
                                     BatchRequestIds(dispatched, prompts)));
  }
  return absl::OkStatus();
}

// The batches in flight, as an asynchronous checkpoint records them (controller.json "rollout").
nlohmann::json InFlightJson(const RolloutDispatcher& rollout) {
  nlohmann::json batches = nlohmann::json::array();
  for (const InFlightBatch& b : rollout.InFlight()) {
    batches.push_back({{"batch", b.batch}, {"request_ids", b.request_ids}});
  }
  return {{"batches", batches}};
}

// Deals again, with their recorded request ids, the batches a checkpoint after iteration
// `from.step` holds in flight (batches step + 1 on, in order). Returns the last one dealt.
absl::StatusOr<int64_t> DispatchRecorded(RolloutDispatcher& rollout, const TaskText& text,
                                         const JobConfig& c, const JobCheckpoint& from) {
  const nlohmann::json& r =
      from.controller.contains("rollout") ? from.controller["rollout"] : nlohmann::json();
  const std::string where = from.dir + "/controller.json";
  if (!r.is_object() || !r.contains("batches") || !r["batches"].is_array()) {
    return absl::DataLossError(
        absl::StrCat(where, ": no rollout.batches (the groups in flight of an asynchronous run)"));
  }
  const int64_t prompts = c.grpo.prompts_per_iteration;
  int64_t dispatched = from.step;
  for (const nlohmann::json& b : r["batches"]) {
    const int64_t batch = b.value("batch", int64_t{-1});
    const std::vector<int64_t> ids = b.value("request_ids", std::vector<int64_t>());
    if (batch != dispatched + 1 || static_cast<int64_t>(ids.size()) != prompts) {
      return absl::DataLossError(absl::StrCat(where, ": in-flight batch ", batch, " with ",
                                              ids.size(), " request ids; expected batch ",
                                              dispatched + 1, " with ", prompts));
    }
    const uint64_t offset = static_cast<uint64_t>((batch - 1) * prompts);
    RETURN_IF_ERROR(rollout.Dispatch(
        batch, text.TrainBatch(static_cast<uint64_t>(c.job.seed), offset, prompts), ids));
    dispatched = batch;
  }
  spdlog::info("resumed with {} batch(es) in flight dealt again", dispatched - from.step);
  return dispatched;
}

// Which groups batch `s` holds (before admission): request_id_first/last and groups, for
// checking that no group is lost or trained twice (across a resume too).
void RecordRequestIds(const Scored& s, IterationRecord& rec) {
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
  for (const LmGroup& g : s.groups) {
    lo = std::min(lo, g.request_id);
    hi = std::max(hi, g.request_id);
  }
  rec.metrics["batch/request_id_first"] = static_cast<double>(lo);
  rec.metrics["batch/request_id_last"] = static_cast<double>(hi);
  rec.metrics["batch/groups"] = static_cast<double>(s.groups.size());
  for (const auto& [k, v] : s.metrics) {
    if (absl::StartsWith(k, "rollout/")) rec.metrics[k] = v;  // per engine: version, groups
  }
}

}  // namespace

absl::Status LmRlAlgorithm::RunAsync(JobContext& ctx, const TaskText& text, LmLoop& loop,
                                     TrainerGroup& trainer, int64_t first, int64_t version) {
  const GrpoOptions& g = config_.grpo;
  const int64_t k = config_.rollout.max_staleness, iterations = config_.job.iterations;
  SamplingParams sampling = TrainSampling(g);
  sampling.seed = static_cast<uint64_t>(config_.job.seed) * 1000003ull;  // with each request id
  RolloutDispatcher rollout(loop, sampling, k);
  int64_t dispatched = first - 1;
  if (const JobCheckpoint* from = ctx.resume_point()) {
    ASSIGN_OR_RETURN(dispatched, DispatchRecorded(rollout, text, config_, *from));
  }
  for (int64_t it = first; it <= iterations; ++it) {
    const Stopwatch t_iter;
    IterationRecord rec;
    rec.step = it;
    RETURN_IF_ERROR(DispatchThrough(rollout, text, config_, it, dispatched));  // this batch
    const Stopwatch t_wait;
    RETURN_IF_ERROR(rollout.ServeUntil([&] { return rollout.Complete(it); }));
    rec.timings["rollout_wall_s"] = t_wait.Seconds();  // the trainer waited for the batch
    ASSIGN_OR_RETURN(Scored s, rollout.Take(it));
    RecordRequestIds(s, rec);
    const double generated = static_cast<double>(s.groups.size() * g.group_size);
    std::vector<double> lag_tokens;
    const int64_t stale = AdmitFresh(version, k, s, lag_tokens);
    if (s.groups.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("iteration ", it, ": every group lags policy version ", version,
                       " by more than rollout.max_staleness (", k, ")"));
    }
    // The trainer gets its batch first; the next batches are dealt (and this one recorded)
    // while it trains, so its request does not queue behind them.
    const Stopwatch t_train;
    RETURN_IF_ERROR(SubmitTrain(trainer, s, g.group_size, it));
    rec.metrics["groups_in_flight"] = static_cast<double>(rollout.owed_groups());
    // The throttle (AReaL's): the fleet serves step it-1's weights now, and batch b may be
    // generated from step b-1-k's on (b <= it + k), so no token of it lags step b's version
    // by more than k.
    RETURN_IF_ERROR(DispatchThrough(rollout, text, config_, it + k, dispatched));
    const double tokens = RecordBatch(config_, text, it, version, s, lag_tokens, ctx, rec);
    // The reward sums cover every scored sample, admitted or not: so does their mean.
    RewardStats(s, generated, rec.metrics, "");
    rec.metrics["stale_groups_discarded"] = static_cast<double>(stale);
    rec.metrics["partial_samples"] = static_cast<double>(PartialSamples(s));
    loop.AddRequeuedMetrics(rec.metrics);  // work dealt again after a worker was lost
    RETURN_IF_ERROR(rollout.ServeUntilReady(trainer.in_flight()));
    ASSIGN_OR_RETURN(WorkOutcome trained, trainer.Await());
    rec.timings["train_s"] = t_train.Seconds();
    // Evaluation deals its own prompts to the engines: they first return all they owe (after
    // the weight sync, so a replacement that takes given-back groups loads the newest weights).
    RETURN_IF_ERROR(
        AfterTrain(ctx, config_, loop, trainer, std::move(trained), it, version, rec,
                   [&] { return rollout.ServeUntil([&] { return rollout.owed_groups() == 0; }); }));
    EndTimings(t_iter.Seconds(), generated, tokens, static_cast<double>(loop.fleet().size()),
               rollout.TakeEngineBusySeconds(), rec);
    RETURN_IF_ERROR(ctx.EndIteration(rec));
    // The batches in flight go into the checkpoint: a resumed run deals them again.
    RETURN_IF_ERROR(CheckpointLmJob(ctx, trainer, it, version, InFlightJson(rollout)));
  }
  return absl::OkStatus();
}

}  // namespace rlforge
