#include "controller/lm_loop.h"

#include <chrono>
#include <cmath>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/logging.h"
#include "common/status.h"
#include "data/jsonl_dataset.h"
#include "reward/reward_role.h"
#include "reward/verifiers.h"

namespace rlforge {

namespace {

// Language-model jobs generate on one engine until the engine fleet exists (config refuses
// rollout.workers > 1 for them).
absl::StatusOr<std::string> OneRollout(const Controller& ctl) {
  std::vector<std::string> ids = ctl.actors().IdsOfRole("rollout");
  if (ids.size() != 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "a language-model job needs exactly one rollout worker, the job has ", ids.size()));
  }
  return ids.front();
}

}  // namespace

std::vector<int32_t> TaskText::Encode(const std::string& system, const std::string& prompt) const {
  return models::EncodePrompt(*tokenizer, *tmpl, system, prompt);
}

std::vector<int32_t> TaskText::EncodeResponse(const std::string& response) const {
  return models::EncodeResponse(*tokenizer, *tmpl, response);
}

std::string TaskText::Response(const LmSample& s) const {
  std::vector<int32_t> ids = s.tokens;
  if (!ids.empty() && ids.back() == tokenizer->eos_id()) ids.pop_back();
  std::string text = tokenizer->Decode(ids);
  const std::string& eot = tmpl->end_of_turn();
  if (!eot.empty() && absl::EndsWith(text, eot)) text.resize(text.size() - eot.size());
  return text;
}

std::vector<PromptExample> TaskText::TrainBatch(uint64_t seed, uint64_t offset,
                                                int64_t count) const {
  if (task) return task->Examples(seed, Split::kTrain, offset, static_cast<size_t>(count));
  std::vector<PromptExample> batch;
  for (int64_t k = 0; k < count; ++k) {
    batch.push_back(train_file[(offset + k) % train_file.size()]);
  }
  return batch;
}

absl::StatusOr<TaskText> LoadTaskText(const JobConfig& c, int64_t heldout_examples) {
  TaskText t;
  ASSIGN_OR_RETURN(t.tokenizer, models::LoadTokenizer(c.model.path));
  ASSIGN_OR_RETURN(models::PromptTemplate tmpl,
                   models::PromptTemplate::Create(c.data.prompt_template));
  t.tmpl = tmpl;
  const DataOptions& d = c.data;
  if (d.source == "jsonl") {
    if (c.job.algorithm->family == AlgorithmFamily::kDpo) {
      ASSIGN_OR_RETURN(t.preference_file, ReadPreferenceJsonl(d.train_path));
      if (t.preference_file.empty()) {
        return absl::InvalidArgumentError(d.train_path + ": no preference pairs");
      }
    } else {
      ASSIGN_OR_RETURN(t.train_file, ReadPromptJsonl(d.train_path, JsonlFormat::kRl));
      if (t.train_file.empty()) return absl::InvalidArgumentError(d.train_path + ": no examples");
    }
    ASSIGN_OR_RETURN(t.heldout, ReadPromptJsonl(d.heldout_path, JsonlFormat::kRl));
  } else {
    ASSIGN_OR_RETURN(ArithmeticTask task, ArithmeticTaskFor(d));
    t.task = task;
    t.heldout = task.Examples(static_cast<uint64_t>(c.job.seed), Split::kHeldout, 0,
                              static_cast<size_t>(heldout_examples));
  }
  if (static_cast<int64_t>(t.heldout.size()) > heldout_examples) {
    t.heldout.resize(static_cast<size_t>(heldout_examples));
  }
  return t;
}

SamplingParams SamplingParams::Greedy(int64_t max_tokens, uint64_t seed) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.seed = seed;
  return p;
}

absl::StatusOr<Scored> LmLoop::GenerateAndScore(const std::vector<PromptExample>& examples,
                                                const SamplingParams& p) {
  Controller& ctl = ctx_.controller();
  const JobConfig& c = ctx_.config();
  const int64_t n = p.n;
  const Stopwatch t0;
  std::vector<LmGroup> prompts(examples.size());
  for (size_t i = 0; i < examples.size(); ++i) {
    prompts[i].request_id = static_cast<int64_t>(i);
    prompts[i].prompt = text_.Encode(c.data.system_prompt, examples[i].prompt);
  }
  proto::WorkRequest gen;
  proto::LmGenerate* lg = gen.mutable_lm_generate();
  lg->set_n(n);
  lg->set_temperature(p.temperature);
  lg->set_top_p(p.top_p);
  lg->set_top_k(p.top_k);
  lg->set_max_tokens(p.max_tokens);
  lg->set_seed(p.seed);
  lg->set_min_groups(std::min<int64_t>(p.stream_groups, static_cast<int64_t>(examples.size())));
  std::vector<TensorFrame> frames = GroupsToFrames(prompts, false);

  Scored out;
  out.examples = examples;
  out.groups.resize(examples.size());
  out.rewards.assign(examples.size() * n, std::nan(""));
  size_t received = 0;
  std::vector<std::pair<uint64_t, std::vector<int64_t>>> scoring;  // work id, request ids
  double gen_tokens = 0, gen_busy = 0, reward_busy = 0;
  ASSIGN_OR_RETURN(const std::string rollout, OneRollout(ctl));
  const std::vector<std::string> rewarders = ctl.actors().IdsOfRole("reward");
  if (rewarders.empty()) return absl::FailedPreconditionError("the job has no reward worker");
  std::vector<std::string> scored_by;  // the reward worker of each scoring request
  ASSIGN_OR_RETURN(uint64_t gen_id, ctl.Submit(rollout, gen, std::move(frames)));
  while (true) {
    ASSIGN_OR_RETURN(WorkOutcome o, ctl.Await(gen_id));
    ASSIGN_OR_RETURN(std::vector<LmGroup> chunk, GroupsFromFrames(o.tensors, true, n));
    gen_tokens += o.result.metrics().at("generated_tokens");
    gen_busy += o.result.metrics().at("generate_s");
    for (const auto& [k, v] : o.result.metrics()) {
      if (k == "preemptions") out.metrics["engine_preemptions"] += v;
    }
    received += chunk.size();
    const bool more = received < examples.size();
    if (more) {  // ask for the next chunk before scoring this one: both run at once
      proto::WorkRequest next = gen;
      ASSIGN_OR_RETURN(gen_id, ctl.Submit(rollout, next, GroupsToFrames({}, false)));
    }
    proto::WorkRequest score;
    std::vector<reward::Sample> samples;
    std::vector<int64_t> ids;
    for (LmGroup& grp : chunk) {
      const int64_t id = grp.request_id;
      if (id < 0 || id >= static_cast<int64_t>(examples.size()) ||
          !out.groups[id].samples.empty()) {
        return absl::InternalError(
            absl::StrCat("rollout returned unknown or repeated request ", id));
      }
      ids.push_back(id);
      for (const LmSample& s : grp.samples) {
        reward::Sample rs;
        rs.prompt = examples[id].prompt;
        rs.response = text_.Response(s);
        rs.answer = examples[id].answer;
        rs.response_tokens = static_cast<int64_t>(s.tokens.size());
        samples.push_back(std::move(rs));
      }
      out.groups[id] = std::move(grp);
    }
    reward::SamplesToProto(samples, score.mutable_score());
    // Round-robin: every chunk is about the same work, so this balances the load.
    const std::string& scorer = rewarders[scoring.size() % rewarders.size()];
    ASSIGN_OR_RETURN(uint64_t sid, ctl.Submit(scorer, std::move(score)));
    scoring.push_back({sid, std::move(ids)});
    scored_by.push_back(scorer);
    if (!more) break;
  }
  for (size_t q = 0; q < scoring.size(); ++q) {
    const auto& [sid, ids] = scoring[q];
    ASSIGN_OR_RETURN(WorkOutcome o, ctl.Await(sid));
    ASSIGN_OR_RETURN(reward::BatchScores scores,
                     reward::ScoresFromProto(o.result.score(), ids.size() * n));
    for (size_t k = 0; k < ids.size(); ++k) {
      for (int64_t j = 0; j < n; ++j) {
        const size_t s = k * n + j;
        if (!scores.ok[s]) {
          return absl::InternalError(absl::StrCat(
              scored_by[q], " could not score sample ", j, " of prompt '", examples[ids[k]].prompt,
              "': ", scores.error[s], " (see logs/", scored_by[q], ".log)"));
        }
        out.rewards[ids[k] * n + j] = scores.total[s];
      }
    }
    for (const auto& pr : scores.rewards) {
      double sum = 0, sq = 0;
      for (size_t k = 0; k < ids.size(); ++k) {
        for (int64_t j = 0; j < n; ++j) {
          const double v = pr.scores[k * n + j].value;
          sum += v;
          sq += v * v;
        }
      }
      out.metrics["reward/" + pr.name + "/sum"] += sum;
      out.metrics["reward/" + pr.name + "/sumsq"] += sq;
    }
    // The reward worker's busy time (reward/reward_role.cc).
    auto busy = o.result.metrics().find("reward/time_s");
    reward_busy += busy == o.result.metrics().end() ? 0 : busy->second;
  }
  out.timings["generate_s"] = gen_busy;
  out.timings["reward_s"] = reward_busy;
  out.timings["rollout_wall_s"] = t0.Seconds();
  out.metrics["generated_tokens"] = gen_tokens;
  return out;
}

absl::Status LmLoop::Evaluate(int64_t max_tokens, uint64_t seed, IterationRecord& rec) {
  const Stopwatch t0;
  ASSIGN_OR_RETURN(Scored s,
                   GenerateAndScore(text_.heldout, SamplingParams::Greedy(max_tokens, seed)));
  int64_t correct = 0;
  for (size_t i = 0; i < s.groups.size(); ++i) {
    const std::string response = text_.Response(s.groups[i].samples[0]);
    auto answer = reward::ExtractAnswer(response, reward::Extract::kFull, false);
    if (answer && reward::NormalizeAnswer(*answer, false) ==
                      reward::NormalizeAnswer(s.examples[i].answer, false)) {
      ++correct;
    }
  }
  const double count = static_cast<double>(s.groups.size());
  rec.metrics["heldout_accuracy"] = count > 0 ? static_cast<double>(correct) / count : 0;
  rec.metrics["heldout_examples"] = count;
  RewardStats(s, count, rec.metrics, "heldout_");
  rec.timings["eval_s"] = t0.Seconds();
  return absl::OkStatus();
}

absl::Status LmLoop::EvaluateStart(int64_t max_tokens, uint64_t seed) {
  IterationRecord rec;
  rec.step = 0;
  RETURN_IF_ERROR(Evaluate(max_tokens, seed, rec));
  spdlog::info("start: held-out accuracy {:.3f}", rec.metrics["heldout_accuracy"]);
  return ctx_.EndIteration(rec);
}

absl::Status LmLoop::SyncWeights(const proto::WeightsReady& weights,
                                 std::vector<TensorFrame> tensors) {
  proto::WorkRequest load;
  *load.mutable_load_weights()->mutable_weights() = weights;
  std::vector<TensorFrame> inline_weights;
  for (auto& t : tensors) {
    if (t.name() == "weights") inline_weights.push_back(std::move(t));
  }
  Controller& ctl = ctx_.controller();
  ASSIGN_OR_RETURN(const std::string rollout, OneRollout(ctl));
  ASSIGN_OR_RETURN(uint64_t id, ctl.Submit(rollout, std::move(load), std::move(inline_weights)));
  return ctl.Await(id).status();
}

std::vector<RoleRequirement> LmRoles(const JobConfig& c) {
  return {{"trainer", static_cast<int>(c.trainer.ranks), false},
          {"rollout", static_cast<int>(c.rollout.workers), c.rollout.external},
          {"reward", static_cast<int>(c.reward.workers), c.reward.external}};
}

void RewardStats(const Scored& s, double count, std::map<std::string, double>& metrics,
                 const std::string& prefix) {
  for (const auto& [k, v] : s.metrics) {
    if (!absl::EndsWith(k, "/sum")) continue;
    const std::string name = k.substr(0, k.size() - 4);
    const double mean = v / count;
    auto sq = s.metrics.find(name + "/sumsq");
    const double var =
        std::max(0.0, (sq == s.metrics.end() ? 0.0 : sq->second) / count - mean * mean);
    metrics[prefix + name + "/mean"] = mean;
    metrics[prefix + name + "/std"] = std::sqrt(var);
  }
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
