#include "controller/grpo_algorithm.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "controller/arith_task.h"
#include "controller/jsonl_dataset.h"
#include "models/chat_template.h"
#include "models/tokenizer.h"
#include "proto/lm_groups.h"
#include "reward/reward_role.h"
#include "reward/verifiers.h"

namespace rlforge {

namespace {

using SteadyClock = std::chrono::steady_clock;

double Since(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

bool IsTiming(const std::string& k) {
  return absl::EndsWith(k, "_s") || absl::EndsWith(k, "_per_s");
}

// Everything the controller needs to turn examples into prompts and responses into text.
struct TaskText {
  std::unique_ptr<models::Tokenizer> tokenizer;
  std::optional<models::PromptTemplate> tmpl;
  std::optional<ArithmeticTask> task;
  std::vector<PromptExample> train_file, heldout;

  std::vector<int32_t> Encode(const std::string& system, const std::string& prompt) const {
    std::vector<int32_t> ids;
    if (tokenizer->bos_id() >= 0) ids.push_back(tokenizer->bos_id());
    auto body = tokenizer->Encode(tmpl->Apply(system, prompt));
    ids.insert(ids.end(), body.begin(), body.end());
    return ids;
  }
  // Response text without the stop token.
  std::string Response(const LmSample& s) const {
    std::vector<int32_t> ids = s.tokens;
    if (!ids.empty() && ids.back() == tokenizer->eos_id()) ids.pop_back();
    std::string text = tokenizer->Decode(ids);
    const std::string& eot = tmpl->end_of_turn();
    if (!eot.empty() && absl::EndsWith(text, eot)) text.resize(text.size() - eot.size());
    return text;
  }
};

absl::StatusOr<TaskText> LoadTaskText(const JobConfig& c) {
  TaskText t;
  ASSIGN_OR_RETURN(t.tokenizer, models::LoadTokenizer(c.model.path));
  ASSIGN_OR_RETURN(models::PromptTemplate tmpl,
                   models::PromptTemplate::Create(c.data.prompt_template));
  t.tmpl = tmpl;
  const DataOptions& d = c.data;
  if (d.source == "jsonl") {
    ASSIGN_OR_RETURN(t.train_file, ReadPromptJsonl(d.train_path, JsonlFormat::kRl));
    ASSIGN_OR_RETURN(t.heldout, ReadPromptJsonl(d.heldout_path, JsonlFormat::kRl));
    if (t.train_file.empty()) return absl::InvalidArgumentError(d.train_path + ": no examples");
  } else {
    ArithmeticOptions o;
    o.min_digits = d.min_digits;
    o.max_digits = d.max_digits;
    o.ops = d.ops;
    o.style = d.style;
    ASSIGN_OR_RETURN(ArithmeticTask task, ArithmeticTask::Create(o));
    t.task = task;
    t.heldout = task.Examples(static_cast<uint64_t>(c.job.seed), Split::kHeldout, 0,
                              static_cast<size_t>(c.grpo.eval_examples));
  }
  if (static_cast<int64_t>(t.heldout.size()) > c.grpo.eval_examples) {
    t.heldout.resize(static_cast<size_t>(c.grpo.eval_examples));
  }
  return t;
}

// Generates answers to `examples` (group size n) on the rollout worker and scores them on
// the reward worker chunk by chunk, as groups finish.
struct Scored {
  std::vector<LmGroup> groups;        // in example order
  std::vector<double> rewards;        // [G * n]
  std::vector<PromptExample> examples;
  std::map<std::string, double> metrics, timings;
};

class Loop {
 public:
  Loop(const JobConfig& c, JobContext& ctx, const TaskText& text)
      : c_(c), ctx_(ctx), text_(text) {}

  absl::StatusOr<Scored> GenerateAndScore(const std::vector<PromptExample>& examples, int64_t n,
                                          bool greedy, uint64_t seed);
  absl::StatusOr<WorkOutcome> Await(uint64_t id) { return ctx_.controller().Await(id); }

 private:
  const JobConfig& c_;
  JobContext& ctx_;
  const TaskText& text_;
};

absl::StatusOr<Scored> Loop::GenerateAndScore(const std::vector<PromptExample>& examples,
                                              int64_t n, bool greedy, uint64_t seed) {
  Controller& ctl = ctx_.controller();
  const GrpoOptions& g = c_.grpo;
  const auto t0 = SteadyClock::now();
  std::vector<LmGroup> prompts(examples.size());
  for (size_t i = 0; i < examples.size(); ++i) {
    prompts[i].request_id = static_cast<int64_t>(i);
    prompts[i].prompt = text_.Encode(c_.data.system_prompt, examples[i].prompt);
  }
  proto::WorkRequest gen;
  proto::LmGenerate* lg = gen.mutable_lm_generate();
  lg->set_n(n);
  lg->set_temperature(greedy ? 0.0 : g.temperature);
  lg->set_top_p(greedy ? 1.0 : g.top_p);
  lg->set_top_k(greedy ? 0 : g.top_k);
  lg->set_max_tokens(g.max_new_tokens);
  lg->set_seed(seed);
  lg->set_min_groups(std::min<int64_t>(g.stream_groups, static_cast<int64_t>(examples.size())));
  std::vector<TensorFrame> frames = GroupsToFrames(prompts, false);

  Scored out;
  out.examples = examples;
  out.groups.resize(examples.size());
  out.rewards.assign(examples.size() * n, std::nan(""));
  size_t received = 0;
  std::vector<std::pair<uint64_t, std::vector<int64_t>>> scoring;  // work id, request ids
  double gen_tokens = 0, gen_busy = 0, reward_busy = 0;
  ASSIGN_OR_RETURN(uint64_t gen_id, ctl.Submit("rollout-0", gen, std::move(frames)));
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
      ASSIGN_OR_RETURN(gen_id, ctl.Submit("rollout-0", next, GroupsToFrames({}, false)));
    }
    proto::WorkRequest score;
    std::vector<reward::Sample> samples;
    std::vector<int64_t> ids;
    for (LmGroup& grp : chunk) {
      const int64_t id = grp.request_id;
      if (id < 0 || id >= static_cast<int64_t>(examples.size()) || !out.groups[id].samples.empty()) {
        return absl::InternalError(absl::StrCat("rollout returned unknown or repeated request ", id));
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
    ASSIGN_OR_RETURN(uint64_t sid, ctl.Submit("reward-0", std::move(score)));
    scoring.push_back({sid, std::move(ids)});
    if (!more) break;
  }
  for (auto& [sid, ids] : scoring) {
    ASSIGN_OR_RETURN(WorkOutcome o, ctl.Await(sid));
    ASSIGN_OR_RETURN(reward::BatchScores scores,
                     reward::ScoresFromProto(o.result.score(), ids.size() * n));
    for (size_t k = 0; k < ids.size(); ++k) {
      for (int64_t j = 0; j < n; ++j) {
        const size_t s = k * n + j;
        if (!scores.ok[s]) {
          return absl::InternalError(absl::StrCat(
              "reward-0 could not score sample ", j, " of prompt '", examples[ids[k]].prompt,
              "': ", scores.error[s], " (see logs/reward-0.log)"));
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
    reward_busy += o.result.metrics().count("score_s") ? o.result.metrics().at("score_s") : 0;
  }
  out.timings["generate_s"] = gen_busy;
  out.timings["reward_s"] = reward_busy;
  out.timings["rollout_wall_s"] = Since(t0);
  out.metrics["generated_tokens"] = gen_tokens;
  return out;
}

double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

// Per-reward mean and std from the sums GenerateAndScore collected.
void RewardStats(Scored& s, double count, std::map<std::string, double>& metrics,
                 const std::string& prefix) {
  for (const auto& [k, v] : s.metrics) {
    if (!absl::EndsWith(k, "/sum")) continue;
    const std::string name = k.substr(0, k.size() - 4);
    const double mean = v / count;
    const double var = std::max(0.0, s.metrics[name + "/sumsq"] / count - mean * mean);
    metrics[prefix + name + "/mean"] = mean;
    metrics[prefix + name + "/std"] = std::sqrt(var);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Algorithm>> GrpoAlgorithm::Create(const JobConfig& config) {
  // Checked here, before any actor starts: otherwise the trainer, the rollout worker and
  // the controller race to report the same missing checkpoint, each in its own words.
  if (config.model.path.empty() || !std::filesystem::is_directory(config.model.path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.path: '", config.model.path,
        "' is not a checkpoint directory; GRPO starts from one (e.g. run "
        "configs/sft_arith.yaml first: runs/sft_arith/checkpoints/step_700)"));
  }
  return std::unique_ptr<Algorithm>(new GrpoAlgorithm(config));
}

absl::Status GrpoAlgorithm::Run(JobContext& ctx) {
  Controller& ctl = ctx.controller();
  const GrpoOptions& g = config_.grpo;
  ASSIGN_OR_RETURN(TaskText text, LoadTaskText(config_));
  Loop loop(config_, ctx, text);
  const int64_t iterations = config_.job.iterations;
  ctx.SetTotalIterations(iterations);
  const uint64_t seed = static_cast<uint64_t>(config_.job.seed);
  int64_t version = 0;
  spdlog::info("GRPO: {} prompts x {} samples per iteration, {} iterations, {} held-out prompts",
               g.prompts_per_iteration, g.group_size, iterations, text.heldout.size());

  auto evaluate = [&](IterationRecord& rec) -> absl::Status {
    const auto t0 = SteadyClock::now();
    ASSIGN_OR_RETURN(Scored s, loop.GenerateAndScore(text.heldout, 1, true, seed));
    int64_t correct = 0;
    for (size_t i = 0; i < s.groups.size(); ++i) {
      const std::string response = text.Response(s.groups[i].samples[0]);
      auto answer = reward::ExtractAnswer(response, reward::Extract::kFull, false);
      if (answer && reward::NormalizeAnswer(*answer, false) ==
                        reward::NormalizeAnswer(s.examples[i].answer, false)) {
        ++correct;
      }
    }
    rec.metrics["heldout_accuracy"] = static_cast<double>(correct) / s.groups.size();
    rec.metrics["heldout_examples"] = static_cast<double>(s.groups.size());
    RewardStats(s, static_cast<double>(s.groups.size()), rec.metrics, "heldout_");
    rec.timings["eval_s"] = Since(t0);
    return absl::OkStatus();
  };

  // Iteration 0: the starting policy's held-out accuracy.
  {
    IterationRecord rec;
    rec.step = 0;
    RETURN_IF_ERROR(evaluate(rec));
    spdlog::info("start: held-out accuracy {:.3f}", rec.metrics["heldout_accuracy"]);
    RETURN_IF_ERROR(ctx.EndIteration(rec));
  }
  for (int64_t it = 1; it <= iterations; ++it) {
    const auto t_iter = SteadyClock::now();
    IterationRecord rec;
    rec.step = it;
    std::vector<PromptExample> batch;
    const uint64_t offset = static_cast<uint64_t>((it - 1) * g.prompts_per_iteration);
    if (text.task) {
      batch = text.task->Examples(seed, Split::kTrain, offset,
                                  static_cast<size_t>(g.prompts_per_iteration));
    } else {
      for (int64_t k = 0; k < g.prompts_per_iteration; ++k) {
        batch.push_back(text.train_file[(offset + k) % text.train_file.size()]);
      }
    }
    ASSIGN_OR_RETURN(Scored s, loop.GenerateAndScore(batch, g.group_size, false,
                                                     seed * 1000003ull + it));
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
          shown.push_back({it, s.examples[i].prompt, text.Response(smp),
                           s.rewards[i * g.group_size + j]});
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
    rec.timings["generate_tokens_per_s"] = s.metrics["generated_tokens"] / s.timings["generate_s"];

    // Train.
    const auto t_train = SteadyClock::now();
    std::vector<TensorFrame> frames = GroupsToFrames(s.groups, true);
    std::vector<float> rewards(s.rewards.begin(), s.rewards.end());
    frames.push_back(TensorFrame::FromVector("rewards", rewards));
    proto::WorkRequest train;
    train.mutable_grpo_train()->set_group_size(g.group_size);
    train.mutable_grpo_train()->set_step(it);
    ASSIGN_OR_RETURN(uint64_t tid, ctl.Submit("trainer-0", std::move(train), std::move(frames)));
    ASSIGN_OR_RETURN(WorkOutcome trained, ctl.Await(tid));
    for (const auto& [k, v] : trained.result.metrics()) (IsTiming(k) ? rec.timings : rec.metrics)[k] = v;
    rec.timings["train_s"] = Since(t_train);

    // Weight sync.
    const auto t_sync = SteadyClock::now();
    proto::WorkRequest load;
    *load.mutable_load_weights()->mutable_weights() = trained.result.weights();
    std::vector<TensorFrame> weights;
    for (auto& t : trained.tensors) {
      if (t.name() == "weights") weights.push_back(std::move(t));
    }
    ASSIGN_OR_RETURN(uint64_t lid, ctl.Submit("rollout-0", std::move(load), std::move(weights)));
    ASSIGN_OR_RETURN(WorkOutcome loaded, ctl.Await(lid));
    version = trained.result.weights().version();
    rec.timings["weight_sync_s"] = Since(t_sync);
    rec.metrics["policy_version"] = static_cast<double>(version);

    if (it == iterations || (g.eval_every > 0 && it % g.eval_every == 0)) {
      RETURN_IF_ERROR(evaluate(rec));
    }
    rec.timings["iteration_s"] = Since(t_iter);
    const double stages = rec.timings["rollout_wall_s"] + rec.timings["train_s"] +
                          rec.timings["weight_sync_s"] + rec.timings["eval_s"];
    rec.timings["controller_share"] =
        std::max(0.0, rec.timings["iteration_s"] - stages) / rec.timings["iteration_s"];
    rec.timings["samples_per_s"] = samples / rec.timings["iteration_s"];
    rec.timings["tokens_per_s"] = response_tokens / rec.timings["iteration_s"];
    RETURN_IF_ERROR(ctx.EndIteration(rec));
  }
  return absl::OkStatus();
}

}  // namespace rlforge
