#include "controller/lm_loop.h"

#include <chrono>
#include <cmath>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/timing_keys.h"
#include "data/jsonl_dataset.h"
#include "reward/answer_check.h"
#include "reward/reward_role.h"

namespace rlforge {

namespace {

// One engine's part of a GenerateAndScore call.
struct EngineStream {
  size_t engine = 0;          // index in the fleet
  std::vector<size_t> share;  // example indices dealt to it, ascending
  size_t received = 0;        // groups back so far
  double busy_s = 0;          // its reported generation seconds
};

}  // namespace

LmLoop::LmLoop(JobContext& ctx, const TaskText& text)
    : ctx_(ctx), text_(text), fleet_(ctx.controller().actors().IdsOfRole("rollout")) {}

std::vector<int32_t> TaskText::Encode(const std::string& system, const std::string& prompt) const {
  return models::EncodePrompt(*tokenizer, *tmpl, system, prompt);
}

std::vector<int32_t> TaskText::EncodeResponse(const std::string& response) const {
  return models::EncodeResponse(*tokenizer, *tmpl, response);
}

std::string TaskText::Response(const LmSample& s) const {
  return models::DecodeResponse(*tokenizer, *tmpl, s.tokens);
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
                   models::PromptTemplate::Create(c.data.prompt_template, t.tokenizer.get()));
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
  const size_t count = examples.size();
  const Stopwatch t0;
  // Request ids are positions in `examples` whatever engine gets them: each group's seed
  // (RequestSeed) and place in the batch follow from them alone.
  std::vector<LmGroup> prompts(count);
  std::vector<int64_t> cost(count);
  for (size_t i = 0; i < count; ++i) {
    prompts[i].request_id = static_cast<int64_t>(i);
    prompts[i].prompt = text_.Encode(c.data.system_prompt, examples[i].prompt);
    cost[i] = static_cast<int64_t>(prompts[i].prompt.size()) + n * p.max_tokens;
  }
  ASSIGN_OR_RETURN(const std::vector<size_t> current, fleet_.Current());
  const std::vector<std::vector<size_t>> shares = DealByTokens(cost, current.size());
  std::vector<EngineStream> streams;
  std::vector<int> stream_of(count, -1);  // which stream each example was dealt to
  for (size_t k = 0; k < current.size(); ++k) {
    if (shares[k].empty()) continue;
    for (size_t i : shares[k]) stream_of[i] = static_cast<int>(streams.size());
    streams.push_back({current[k], shares[k], 0, 0});
  }
  const std::vector<std::string> rewarders = ctl.actors().IdsOfRole("reward");
  if (rewarders.empty()) return absl::FailedPreconditionError("the job has no reward worker");

  proto::WorkRequest gen;
  proto::LmGenerate* lg = gen.mutable_lm_generate();
  lg->set_n(n);
  lg->set_temperature(p.temperature);
  lg->set_top_p(p.top_p);
  lg->set_top_k(p.top_k);
  lg->set_max_tokens(p.max_tokens);
  lg->set_seed(p.seed);
  // In flight: one LmGenerate per engine still owing groups (the first carries its share,
  // each later one asks for the next chunk).
  std::vector<uint64_t> waiting;
  std::vector<size_t> waiting_stream;
  for (size_t s = 0; s < streams.size(); ++s) {
    std::vector<LmGroup> share;
    for (size_t i : streams[s].share) share.push_back(prompts[i]);
    proto::WorkRequest first = gen;
    first.mutable_lm_generate()->set_min_groups(
        std::min<int64_t>(p.stream_groups, static_cast<int64_t>(share.size())));
    ASSIGN_OR_RETURN(uint64_t id, ctl.Submit(fleet_.id(streams[s].engine), std::move(first),
                                             GroupsToFrames(share, false)));
    waiting.push_back(id);
    waiting_stream.push_back(s);
  }

  Scored out;
  out.examples = examples;
  out.groups.resize(count);
  out.rewards.assign(count * n, std::nan(""));
  std::vector<bool> arrived(count, false);
  std::vector<std::pair<uint64_t, std::vector<int64_t>>> scoring;  // work id, request ids
  std::vector<std::string> scored_by;  // the reward worker of each scoring request
  double gen_tokens = 0;
  while (!waiting.empty()) {
    ASSIGN_OR_RETURN(auto ready, ctl.AwaitAny(waiting));
    WorkOutcome& o = ready.second;
    EngineStream& st = streams[waiting_stream[ready.first]];
    const std::string& engine = fleet_.id(st.engine);
    waiting.erase(waiting.begin() + static_cast<std::ptrdiff_t>(ready.first));
    waiting_stream.erase(waiting_stream.begin() + static_cast<std::ptrdiff_t>(ready.first));
    RETURN_IF_ERROR(fleet_.CheckReply(st.engine, o.result.policy_version()));
    ASSIGN_OR_RETURN(std::vector<LmGroup> chunk, GroupsFromFrames(o.tensors, true, n));
    gen_tokens += o.result.metrics().at("generated_tokens");
    st.busy_s += o.result.metrics().at("generate_s");
    for (const auto& [k, v] : o.result.metrics()) {
      if (k == "preemptions") out.metrics["engine_preemptions"] += v;
    }
    st.received += chunk.size();
    if (chunk.empty() || st.received > st.share.size()) {
      return absl::InternalError(absl::StrCat(engine, " returned ", chunk.size(), " groups with ",
                                              st.share.size() + chunk.size() - st.received,
                                              " of its share outstanding"));
    }
    if (st.received < st.share.size()) {  // ask for its next chunk before scoring this one
      proto::WorkRequest next = gen;
      next.mutable_lm_generate()->set_min_groups(
          std::min<int64_t>(p.stream_groups, static_cast<int64_t>(st.share.size() - st.received)));
      ASSIGN_OR_RETURN(uint64_t id, ctl.Submit(engine, std::move(next), GroupsToFrames({}, false)));
      waiting.push_back(id);
      waiting_stream.push_back(static_cast<size_t>(&st - streams.data()));
    }
    proto::WorkRequest score;
    std::vector<reward::Sample> samples;
    std::vector<int64_t> ids;
    for (LmGroup& grp : chunk) {
      const int64_t id = grp.request_id;
      if (id < 0 || id >= static_cast<int64_t>(count) || arrived[id] ||
          &streams[stream_of[id]] != &st) {
        return absl::InternalError(
            absl::StrCat(engine, " returned unknown or repeated request ", id));
      }
      arrived[id] = true;
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
  }

  // Per reward, each sample's score by its place in the batch: the sums run in example
  // order, so they do not depend on how chunks arrived.
  std::map<std::string, std::vector<double>> by_reward;
  double reward_busy = 0;
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
      std::vector<double>& v = by_reward[pr.name];
      v.resize(count * n, 0.0);
      for (size_t k = 0; k < ids.size(); ++k) {
        for (int64_t j = 0; j < n; ++j) v[ids[k] * n + j] = pr.scores[k * n + j].value;
      }
    }
    // The reward worker's busy time (reward/reward_role.cc).
    auto busy = o.result.metrics().find("reward/time_s");
    reward_busy += busy == o.result.metrics().end() ? 0 : busy->second;
  }
  for (const auto& [name, values] : by_reward) {
    double sum = 0, sq = 0;
    for (double v : values) {
      sum += v;
      sq += v * v;
    }
    out.metrics["reward/" + name + "/sum"] = sum;
    out.metrics["reward/" + name + "/sumsq"] = sq;
  }
  double busiest = 0;
  for (const EngineStream& st : streams) busiest = std::max(busiest, st.busy_s);
  for (size_t e = 0; e < fleet_.size(); ++e) {
    const std::string prefix = absl::StrCat("rollout/", e, "/");
    out.metrics[prefix + "version"] = static_cast<double>(fleet_.version(e));
    out.metrics[prefix + "groups"] = 0;
    out.timings[prefix + "generate_s"] = 0;
  }
  for (const EngineStream& st : streams) {
    const std::string prefix = absl::StrCat("rollout/", st.engine, "/");
    out.metrics[prefix + "groups"] = static_cast<double>(st.share.size());
    out.timings[prefix + "generate_s"] = st.busy_s;
  }
  out.timings["generate_s"] = busiest;
  out.timings["reward_s"] = reward_busy;
  out.timings["rollout_wall_s"] = t0.Seconds();
  out.metrics["generated_tokens"] = gen_tokens;
  return out;
}

absl::Status LmLoop::Evaluate(int64_t max_tokens, uint64_t seed, AnswerCheck check,
                              IterationRecord& rec) {
  const Stopwatch t0;
  ASSIGN_OR_RETURN(Scored s,
                   GenerateAndScore(text_.heldout, SamplingParams::Greedy(max_tokens, seed)));
  const reward::AnswerJudge judge(check);
  int64_t correct = 0;
  for (size_t i = 0; i < s.groups.size(); ++i) {
    if (judge.Correct(text_.Response(s.groups[i].samples[0]), s.examples[i].answer)) ++correct;
  }
  const double count = static_cast<double>(s.groups.size());
  rec.metrics["heldout_accuracy"] = count > 0 ? static_cast<double>(correct) / count : 0;
  rec.metrics["heldout_examples"] = count;
  RewardStats(s, count, rec.metrics, "heldout_");
  rec.timings["eval_s"] = t0.Seconds();
  return absl::OkStatus();
}

absl::Status LmLoop::EvaluateStart(int64_t max_tokens, uint64_t seed, AnswerCheck check) {
  IterationRecord rec;
  rec.step = 0;
  RETURN_IF_ERROR(Evaluate(max_tokens, seed, check, rec));
  spdlog::info("start: held-out accuracy {:.3f}", rec.metrics["heldout_accuracy"]);
  return ctx_.EndIteration(rec);
}

absl::Status LmLoop::SyncWeights(TrainerGroup& trainer, const proto::WeightsReady& announced,
                                 std::vector<TensorFrame> tensors, IterationRecord& rec) {
  Controller& ctl = ctx_.controller();
  if (fleet_.size() == 0) return absl::FailedPreconditionError("the job has no rollout worker");
  proto::WorkRequest load;
  *load.mutable_load_weights()->mutable_weights() = announced;
  const TensorFrame* inline_weights = nullptr;
  for (const TensorFrame& t : tensors) {
    if (t.name() == "weights") inline_weights = &t;
  }
  // Engines that serve the version already (a step that did not update the policy) skip it;
  // lagging ones load it too, so each can catch up.
  std::vector<size_t> loaders;
  for (size_t e = 0; e < fleet_.size(); ++e) {
    if (fleet_.version(e) != announced.version()) loaders.push_back(e);
  }
  fleet_.Require(announced.version());
  if (loaders.empty()) return absl::OkStatus();
  const bool streamed = announced.location() != "inline";
  if (streamed) {
    proto::WorkRequest publish;
    publish.mutable_publish_weights()->set_readers(static_cast<int32_t>(loaders.size()));
    RETURN_IF_ERROR(trainer.Submit(std::move(publish)));
  }
  std::vector<uint64_t> ids;
  for (size_t e : loaders) {
    std::vector<TensorFrame> frames;
    if (inline_weights != nullptr) {
      const TensorFrame& w = *inline_weights;
      frames.push_back(TensorFrame::Copy(w.name(), w.dtype(), w.shape(), w.data()));
    }
    ASSIGN_OR_RETURN(uint64_t id, ctl.Submit(fleet_.id(e), load, std::move(frames)));
    ids.push_back(id);
  }
  std::vector<WorkOutcome> acks;
  if (streamed) {
    ASSIGN_OR_RETURN(auto outcomes, trainer.AwaitWith(ids));
    SplitTimingsFromMetrics(outcomes.first.result.metrics(), rec.timings, rec.metrics);
    acks = std::move(outcomes.second);
  } else {
    ASSIGN_OR_RETURN(acks, ctl.AwaitAll(ids));
  }
  for (size_t i = 0; i < loaders.size(); ++i) {
    const size_t e = loaders[i];
    const int64_t served = acks[i].result.policy_version();
    fleet_.Served(e, served);
    const auto& m = acks[i].result.metrics();
    const std::string prefix = absl::StrCat("rollout/", e, "/");
    // A rate measured by the clock: a timing, like the seconds around it.
    if (m.count("weight_gbps")) rec.timings[prefix + "weight_gbps"] = m.at("weight_gbps");
    if (m.count("weight_read_s")) rec.timings[prefix + "weight_read_s"] = m.at("weight_read_s");
    if (m.count("load_s")) rec.timings[prefix + "weight_load_s"] = m.at("load_s");
    if (served != announced.version()) {
      spdlog::warn(
          "{} serves policy version {} after loading version {}: it generates nothing "
          "until it serves the current version",
          fleet_.id(e), served, announced.version());
    }
  }
  return absl::OkStatus();
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
