#include "controller/lm_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/timing_keys.h"
#include "data/heldout_set.h"
#include "data/jsonl_dataset.h"
#include "reward/answer_check.h"
#include "reward/reward_role.h"

namespace rlforge {

namespace {

// One engine's part of a GenerateAndScore call. Requests to one engine go one at a time: the
// first carries groups, each later one carries the groups dealt since (if any) and asks for the
// next chunk.
struct EngineStream {
  std::vector<size_t> dealt;   // example indices dealt to it, in dealing order
  std::vector<size_t> unsent;  // dealt, not yet sent to it
  size_t received = 0;         // groups back so far
  double busy_s = 0;           // its reported generation seconds
  uint64_t in_flight = 0;      // work id of its request awaiting a reply; 0: none
};

// One scoring request in flight: what to resend if its reward worker is lost.
struct ScoreRequest {
  std::string scorer;
  std::vector<int64_t> ids;  // request ids (example indices) scored, in order
  proto::ScoreTask task;
};

}  // namespace

// The state of one GenerateAndScore call: examples dealt to engines, chunks back, chunks on
// reward workers. A work lost with its actor is dealt again (groups to live current engines,
// scoring to another reward worker); each example's group is accepted exactly once.
class LmLoop::Round {
 public:
  Round(LmLoop& loop, const std::vector<PromptExample>& examples, const SamplingParams& p);
  absl::StatusOr<Scored> Run();

 private:
  absl::Status Deal(const std::vector<size_t>& indices);
  absl::Status SendTo(size_t engine);
  absl::Status OnGenerated(size_t engine, WorkOutcome o);
  absl::Status OnScored(uint64_t work_id, WorkOutcome o);
  // Deals what `engine` owes again, to the engines serving (it was lost).
  absl::Status GiveBack(size_t engine);
  absl::Status Score(ScoreRequest request);
  void Finish();

  LmLoop& loop_;
  Controller& ctl_;
  const std::vector<PromptExample>& examples_;
  const SamplingParams& p_;
  const Stopwatch t0_;
  proto::WorkRequest gen_;
  std::vector<LmGroup> prompts_;
  std::vector<int64_t> cost_;
  std::vector<EngineStream> streams_;  // by fleet index
  std::vector<size_t> sent_order_;     // engines with a request in flight, oldest first
  std::vector<int> engine_of_;         // the engine each example is dealt to; -1: none
  std::vector<bool> arrived_;
  std::map<uint64_t, ScoreRequest> scoring_;  // by work id
  std::map<std::string, std::vector<double>> by_reward_;
  size_t scores_sent_ = 0;
  double gen_tokens_ = 0, reward_busy_ = 0;
  Scored out_;
};

LmLoop::LmLoop(JobContext& ctx, const TaskText& text)
    : ctx_(ctx), text_(text), fleet_(ctx.controller().actors().IdsOfRole("rollout")) {
  for (const std::string& id : ctx.controller().actors().IdsOfRole("rollout")) {
    incarnation_.push_back(ctx.controller().actors().Find(id)->incarnation);
    unloaded_.push_back(false);
  }
}

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
  if (d.source == DataSource::kJsonl) {
    if (c.job.algorithm->family == AlgorithmFamily::kDpo) {
      ASSIGN_OR_RETURN(t.preference_file, ReadPreferenceJsonl(d.train_path));
      if (t.preference_file.empty()) {
        return absl::InvalidArgumentError(d.train_path + ": no preference pairs");
      }
    } else {
      ASSIGN_OR_RETURN(t.train_file, ReadPromptJsonl(d.train_path, JsonlFormat::kRl));
      if (t.train_file.empty()) return absl::InvalidArgumentError(d.train_path + ": no examples");
    }
  } else {
    ASSIGN_OR_RETURN(ArithmeticTask task, ArithmeticTaskFor(d));
    t.task = task;
  }
  ASSIGN_OR_RETURN(t.heldout, HeldoutExamples(d, static_cast<uint64_t>(c.job.seed),
                                              heldout_examples, JsonlFormat::kRl));
  return t;
}

absl::StatusOr<HeldoutEvaluation> HeldoutEvaluationOf(const JobConfig& c) {
  const AlgorithmSpec& a = *c.job.algorithm;
  HeldoutEvaluation e;
  switch (a.family) {
    case AlgorithmFamily::kLmRl:
      e.examples = c.grpo.eval_examples;
      e.max_new_tokens = c.grpo.max_new_tokens;
      e.verifier = c.grpo.eval_verifier;
      return e;
    case AlgorithmFamily::kDpo:
      e.examples = c.dpo.eval_examples;
      e.max_new_tokens = c.dpo.max_new_tokens;
      return e;
    case AlgorithmFamily::kSft:
      e.examples = c.data.heldout_examples;
      e.max_new_tokens = c.sft.max_new_tokens;
      e.sft = true;
      return e;
    case AlgorithmFamily::kEcho:
    case AlgorithmFamily::kControlPpo:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("job.algorithm ", a.name, " has no held-out evaluation of a language model"));
}

absl::StatusOr<std::vector<PromptExample>> JobHeldoutSet(const JobConfig& c,
                                                         const HeldoutEvaluation& e,
                                                         int64_t count) {
  ASSIGN_OR_RETURN(std::vector<PromptExample> examples,
                   HeldoutExamples(c.data, static_cast<uint64_t>(c.job.seed), count,
                                   e.sft ? JsonlFormat::kSft : JsonlFormat::kRl));
  if (e.sft) {
    for (PromptExample& ex : examples) ex.answer = ex.response;
  }
  return examples;
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
  Round round(*this, examples, p);
  return round.Run();
}

LmLoop::Round::Round(LmLoop& loop, const std::vector<PromptExample>& examples,
                     const SamplingParams& p)
    : loop_(loop), ctl_(loop.ctx_.controller()), examples_(examples), p_(p) {
  const JobConfig& c = loop.ctx_.config();
  const size_t count = examples.size();
  // Request ids are positions in `examples` whatever engine gets them: each group's seed
  // (RequestSeed) and place in the batch follow from them alone, so a group dealt again after
  // its engine was lost comes out the same.
  prompts_.resize(count);
  cost_.resize(count);
  for (size_t i = 0; i < count; ++i) {
    prompts_[i].request_id = static_cast<int64_t>(i);
    prompts_[i].prompt = loop.text_.Encode(c.data.system_prompt, examples[i].prompt);
    cost_[i] = static_cast<int64_t>(prompts_[i].prompt.size()) + p.n * p.max_tokens;
  }
  streams_.resize(loop.fleet_.size());
  engine_of_.assign(count, -1);
  arrived_.assign(count, false);
  proto::LmGenerate* lg = gen_.mutable_lm_generate();
  lg->set_n(p.n);
  lg->set_temperature(p.temperature);
  lg->set_top_p(p.top_p);
  lg->set_top_k(p.top_k);
  lg->set_max_tokens(p.max_tokens);
  lg->set_seed(p.seed);
  out_.examples = examples;
  out_.groups.resize(count);
  out_.rewards.assign(count * p.n, std::nan(""));
}

absl::Status LmLoop::Round::Deal(const std::vector<size_t>& indices) {
  if (indices.empty()) return absl::OkStatus();
  // CurrentEngines may serve the controller (loading a replacement), and an engine can be
  // declared lost meanwhile: deal only to those still serving once it returns (nothing
  // changes them until this round serves the controller again).
  std::vector<size_t> current;
  while (current.empty()) {
    ASSIGN_OR_RETURN(current, loop_.CurrentEngines());
    const std::vector<size_t> serving = loop_.ServingEngines();
    std::erase_if(current, [&](size_t e) {
      return std::find(serving.begin(), serving.end(), e) == serving.end();
    });
  }
  std::vector<int64_t> cost;
  for (size_t i : indices) cost.push_back(cost_[i]);
  const std::vector<std::vector<size_t>> shares = DealByTokens(cost, current.size());
  for (size_t k = 0; k < current.size(); ++k) {
    EngineStream& st = streams_[current[k]];
    for (size_t j : shares[k]) {
      engine_of_[indices[j]] = static_cast<int>(current[k]);
      st.dealt.push_back(indices[j]);
      st.unsent.push_back(indices[j]);
    }
    if (st.in_flight == 0 && !st.unsent.empty()) RETURN_IF_ERROR(SendTo(current[k]));
  }
  return absl::OkStatus();
}

absl::Status LmLoop::Round::SendTo(size_t engine) {
  EngineStream& st = streams_[engine];
  std::vector<LmGroup> groups;
  for (size_t i : st.unsent) groups.push_back(prompts_[i]);
  st.unsent.clear();
  proto::WorkRequest req = gen_;
  req.mutable_lm_generate()->set_min_groups(
      std::min<int64_t>(p_.stream_groups, static_cast<int64_t>(st.dealt.size() - st.received)));
  ASSIGN_OR_RETURN(st.in_flight, ctl_.Submit(loop_.fleet_.id(engine), std::move(req),
                                             GroupsToFrames(groups, false)));
  sent_order_.push_back(engine);
  return absl::OkStatus();
}

absl::StatusOr<Scored> LmLoop::Round::Run() {
  if (ctl_.actors().IdsOfRole("reward").empty()) {
    return absl::FailedPreconditionError("the job has no reward worker");
  }
  // Below a role's minimum the round waits (joins, replacements) rather than starting.
  const JobConfig& c = loop_.ctx_.config();
  RETURN_IF_ERROR(
      ctl_.AwaitLive("rollout", static_cast<int>(c.rollout.min_workers), "rollout.min_workers"));
  RETURN_IF_ERROR(
      ctl_.AwaitLive("reward", static_cast<int>(c.reward.min_workers), "reward.min_workers"));
  std::vector<size_t> all(examples_.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  RETURN_IF_ERROR(Deal(all));
  while (true) {
    std::vector<uint64_t> waiting;
    std::vector<size_t> engine_of_wait;  // the engine of each generation in `waiting`
    for (size_t e : sent_order_) {
      waiting.push_back(streams_[e].in_flight);
      engine_of_wait.push_back(e);
    }
    const size_t generating = waiting.size();
    for (const auto& [id, req] : scoring_) waiting.push_back(id);
    if (waiting.empty()) break;
    ASSIGN_OR_RETURN(auto ready, ctl_.AwaitNext(waiting));
    if (ready.first < generating) {
      RETURN_IF_ERROR(OnGenerated(engine_of_wait[ready.first], std::move(ready.second)));
    } else {
      RETURN_IF_ERROR(OnScored(waiting[ready.first], std::move(ready.second)));
    }
  }
  for (size_t i = 0; i < examples_.size(); ++i) {
    if (!arrived_[i] || out_.groups[i].request_id != static_cast<int64_t>(i)) {
      return absl::InternalError(absl::StrCat("prompt ", i, " has no group after generation"));
    }
  }
  Finish();
  return std::move(out_);
}

absl::Status LmLoop::Round::OnGenerated(size_t engine, WorkOutcome o) {
  EngineStream& st = streams_[engine];
  st.in_flight = 0;
  sent_order_.erase(std::find(sent_order_.begin(), sent_order_.end(), engine));
  const std::string& id = loop_.fleet_.id(engine);
  if (o.lost) return GiveBack(engine);
  RETURN_IF_ERROR(loop_.fleet_.CheckReply(engine, o.result.policy_version()));
  const int64_t n = p_.n;
  ASSIGN_OR_RETURN(std::vector<LmGroup> chunk, GroupsFromFrames(o.tensors, true, n));
  gen_tokens_ += o.result.metrics().at("generated_tokens");
  st.busy_s += o.result.metrics().at("generate_s");
  for (const auto& [k, v] : o.result.metrics()) {
    if (k == "preemptions") out_.metrics["engine_preemptions"] += v;
  }
  st.received += chunk.size();
  if (chunk.empty() || st.received > st.dealt.size()) {
    return absl::InternalError(absl::StrCat(id, " returned ", chunk.size(), " groups with ",
                                            st.dealt.size() + chunk.size() - st.received,
                                            " of its share outstanding"));
  }
  // Ask for its next chunk (with any groups dealt to it since) before scoring this one; an
  // engine lost meanwhile (noticed in the same round) gives its share back instead.
  if (st.received < st.dealt.size()) {
    const ActorInfo* a = ctl_.actors().Find(id);
    const bool live = a->state == ActorState::kReady || a->state == ActorState::kBusy;
    RETURN_IF_ERROR(live ? SendTo(engine) : GiveBack(engine));
  }
  ScoreRequest req;
  std::vector<reward::Sample> samples;
  for (LmGroup& grp : chunk) {
    const int64_t r = grp.request_id;
    if (r < 0 || r >= static_cast<int64_t>(examples_.size()) || arrived_[r] ||
        engine_of_[r] != static_cast<int>(engine)) {
      return absl::InternalError(absl::StrCat(id, " returned unknown or repeated request ", r));
    }
    arrived_[r] = true;
    req.ids.push_back(r);
    for (const LmSample& s : grp.samples) {
      reward::Sample rs;
      rs.prompt = examples_[r].prompt;
      rs.response = loop_.text_.Response(s);
      rs.answer = examples_[r].answer;
      rs.response_tokens = static_cast<int64_t>(s.tokens.size());
      samples.push_back(std::move(rs));
    }
    out_.groups[r] = std::move(grp);
  }
  reward::SamplesToProto(samples, &req.task);
  return Score(std::move(req));
}

absl::Status LmLoop::Round::GiveBack(size_t engine) {
  EngineStream& st = streams_[engine];
  // Everything dealt to it and not back goes to the engines still serving.
  std::vector<size_t> again, kept;
  for (size_t i : st.dealt) (arrived_[i] ? kept : again).push_back(i);
  // An engine that left on purpose handed them back: not a fault.
  const bool left = ctl_.actors().Find(loop_.fleet_.id(engine))->state == ActorState::kLeft;
  spdlog::log(left ? spdlog::level::info : spdlog::level::warn,
              "{} {} with {} group(s) outstanding: dealt again", loop_.fleet_.id(engine),
              left ? "left" : "lost", again.size());
  st.dealt = std::move(kept);
  st.unsent.clear();
  if (!left) loop_.CountRequeued(static_cast<int64_t>(again.size()), 0);
  return Deal(again);
}

absl::Status LmLoop::Round::Score(ScoreRequest request) {
  std::vector<std::string> live = ctl_.actors().LiveOfRole("reward");
  if (live.empty()) {
    RETURN_IF_ERROR(ctl_.AwaitLive("reward"));
    live = ctl_.actors().LiveOfRole("reward");
  }
  // Round-robin: every chunk is about the same work, so this balances the load.
  request.scorer = live[scores_sent_++ % live.size()];
  proto::WorkRequest score;
  *score.mutable_score() = request.task;
  ASSIGN_OR_RETURN(uint64_t sid, ctl_.Submit(request.scorer, std::move(score)));
  scoring_[sid] = std::move(request);
  return absl::OkStatus();
}

absl::Status LmLoop::Round::OnScored(uint64_t work_id, WorkOutcome o) {
  ScoreRequest req = std::move(scoring_.extract(work_id).mapped());
  if (o.lost) {
    spdlog::log(o.left ? spdlog::level::info : spdlog::level::warn,
                "{} {} while scoring {} group(s): sent again", req.scorer, o.left ? "left" : "lost",
                req.ids.size());
    if (!o.left) loop_.CountRequeued(0, 1);
    return Score(std::move(req));
  }
  const int64_t n = p_.n;
  const std::vector<int64_t>& ids = req.ids;
  ASSIGN_OR_RETURN(reward::BatchScores scores,
                   reward::ScoresFromProto(o.result.score(), ids.size() * n));
  for (size_t k = 0; k < ids.size(); ++k) {
    for (int64_t j = 0; j < n; ++j) {
      const size_t s = k * n + j;
      if (!scores.ok[s]) {
        return absl::InternalError(absl::StrCat(
            req.scorer, " could not score sample ", j, " of prompt '", examples_[ids[k]].prompt,
            "': ", scores.error[s], " (see logs/", req.scorer, ".log)"));
      }
      out_.rewards[ids[k] * n + j] = scores.total[s];
    }
  }
  // Per reward, each sample's score by its place in the batch: the sums run in example order,
  // so they do not depend on how chunks arrived.
  for (const auto& pr : scores.rewards) {
    std::vector<double>& v = by_reward_[pr.name];
    v.resize(examples_.size() * n, 0.0);
    for (size_t k = 0; k < ids.size(); ++k) {
      for (int64_t j = 0; j < n; ++j) v[ids[k] * n + j] = pr.scores[k * n + j].value;
    }
  }
  // The reward worker's busy time (reward/reward_role.cc).
  auto busy = o.result.metrics().find("reward/time_s");
  reward_busy_ += busy == o.result.metrics().end() ? 0 : busy->second;
  return absl::OkStatus();
}

void LmLoop::Round::Finish() {
  AddRewardSums(by_reward_, out_.rewards, out_.metrics);
  double busiest = 0;
  for (size_t e = 0; e < loop_.fleet_.size(); ++e) {
    // An elastic slot nobody ever joined has nothing to report.
    if (ctl_.actors().Find(loop_.fleet_.id(e))->incarnation == 0) continue;
    const std::string prefix = absl::StrCat("rollout/", e, "/");
    out_.metrics[prefix + "version"] = static_cast<double>(loop_.fleet_.version(e));
    out_.metrics[prefix + "groups"] = static_cast<double>(streams_[e].received);
    out_.timings[prefix + "generate_s"] = streams_[e].busy_s;
    busiest = std::max(busiest, streams_[e].busy_s);
  }
  out_.timings["generate_s"] = busiest;
  out_.timings["reward_s"] = reward_busy_;
  out_.timings["rollout_wall_s"] = t0_.Seconds();
  out_.metrics["generated_tokens"] = gen_tokens_;
  loop_.AddRequeuedMetrics(out_.metrics);
}

void LmLoop::CountRequeued(int64_t groups, int64_t scores) {
  requeued_groups_ += groups;
  requeued_scores_ += scores;
}

void LmLoop::AddRequeuedMetrics(std::map<std::string, double>& metrics) const {
  if (requeued_groups_ > 0 || requeued_scores_ > 0) {  // totals, once it happened
    metrics["faults/requeued_groups"] = static_cast<double>(requeued_groups_);
    metrics["faults/requeued_scores"] = static_cast<double>(requeued_scores_);
  }
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
  if (fleet_.size() == 0) return absl::FailedPreconditionError("the job has no rollout worker");
  trainer_ = &trainer;
  if (last_weights_.location() != announced.location()) {  // the first version, in practice
    spdlog::info("policy weights reach the engines via {}", announced.location());
  }
  last_weights_ = announced;
  last_frames_.clear();
  for (TensorFrame& t : tensors) {
    if (t.name() == "weights") last_frames_.push_back(std::move(t));
  }
  // New engines not given the weights yet load this version with the others (one stream).
  MarkEngines();
  // Engines that serve the version already (a step that did not update the policy) skip it;
  // lagging ones load it too, so each can catch up. Lost ones load it once replaced.
  // An engine not live now (lost, or relaunched and not yet registered) loads it once its
  // replacement registers (Refresh).
  std::vector<size_t> loaders;
  for (size_t e = 0; e < fleet_.size(); ++e) {
    if (fleet_.version(e) != announced.version() && fleet_.version(e) != kLostVersion && Live(e)) {
      loaders.push_back(e);
    }
  }
  fleet_.Require(announced.version());
  std::fill(unloaded_.begin(), unloaded_.end(), false);
  return LoadOnto(loaders, &rec);
}

absl::Status LmLoop::LoadOnto(const std::vector<size_t>& loaders, IterationRecord* rec) {
  if (loaders.empty()) return absl::OkStatus();
  Controller& ctl = ctx_.controller();
  proto::WorkRequest load;
  *load.mutable_load_weights()->mutable_weights() = last_weights_;
  const bool streamed = last_weights_.location() != "inline";
  // gloo and nccl stream in a group of the trainer and exactly these loaders:
  // "<transport>:<group>".
  const std::string& location = last_weights_.location();
  const std::string transport = location.substr(0, location.find(':'));
  const bool grouped = IsGroupWeightTransport(transport);
  if (streamed) {
    // A stream of its own, even for a version streamed before (to new engines): the shm ring
    // tags its buckets with this number.
    load.mutable_load_weights()->set_publication(++publications_);
    proto::WorkRequest publish;
    publish.mutable_publish_weights()->set_readers(static_cast<int32_t>(loaders.size()));
    publish.mutable_publish_weights()->set_publication(publications_);
    // On the ring, a reader whose process is gone is not waited for (the controller kills a
    // launched engine it declares lost): a lost loader does not hold the stream.
    for (size_t e : loaders) {
      publish.mutable_publish_weights()->add_reader_pids(ctl.actors().Find(fleet_.id(e))->pid);
    }
    if (grouped) {
      const std::string group = WeightGroupFor(loaders);
      publish.mutable_publish_weights()->set_group(group);
      load.mutable_load_weights()->mutable_weights()->set_location(transport + ":" + group);
      load.mutable_load_weights()->set_group_size(static_cast<int32_t>(loaders.size()) + 1);
    }
    RETURN_IF_ERROR(trainer_->Submit(std::move(publish)));
  }
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < loaders.size(); ++i) {
    const size_t e = loaders[i];
    if (grouped) load.mutable_load_weights()->set_group_rank(static_cast<int32_t>(i) + 1);
    if (streamed) load.mutable_load_weights()->set_reader(static_cast<int32_t>(i));
    std::vector<TensorFrame> frames;
    for (const TensorFrame& w : last_frames_) {
      frames.push_back(TensorFrame::Copy(w.name(), w.dtype(), w.shape(), w.data()));
    }
    ASSIGN_OR_RETURN(uint64_t id, ctl.Submit(fleet_.id(e), load, std::move(frames)));
    ids.push_back(id);
  }
  std::vector<WorkOutcome> acks(ids.size());
  if (streamed) {
    // The trainer streams to exactly these readers. Over gloo or nccl one lost mid-stream fails
    // the stream; on the shm ring the stream goes on once its process is gone (killed when it
    // was declared lost), and it is marked lost below.
    ASSIGN_OR_RETURN(auto outcomes, trainer_->AwaitWith(ids));
    if (rec != nullptr) {
      SplitTimingsFromMetrics(outcomes.first.result.metrics(), rec->timings, rec->metrics);
    }
    acks = std::move(outcomes.second);
  } else {
    std::vector<uint64_t> waiting = ids;
    while (!waiting.empty()) {
      ASSIGN_OR_RETURN(auto ready, ctl.AwaitNext(waiting));
      const size_t i = std::find(ids.begin(), ids.end(), waiting[ready.first]) - ids.begin();
      acks[i] = std::move(ready.second);
      waiting.erase(waiting.begin() + static_cast<std::ptrdiff_t>(ready.first));
    }
  }
  for (size_t i = 0; i < loaders.size(); ++i) {
    const size_t e = loaders[i];
    if (acks[i].lost) {  // its replacement loads the weights when it registers
      fleet_.Served(e, kLostVersion);
      continue;
    }
    const int64_t served = acks[i].result.policy_version();
    fleet_.Served(e, served);
    const auto& m = acks[i].result.metrics();
    const std::string prefix = absl::StrCat("rollout/", e, "/");
    if (rec != nullptr) {
      // A rate measured by the clock: a timing, like the seconds around it.
      if (m.count("weight_gbps")) rec->timings[prefix + "weight_gbps"] = m.at("weight_gbps");
      if (m.count("weight_read_s")) rec->timings[prefix + "weight_read_s"] = m.at("weight_read_s");
      if (m.count("load_s")) rec->timings[prefix + "weight_load_s"] = m.at("load_s");
    }
    if (served != last_weights_.version()) {
      spdlog::warn(
          "{} serves policy version {} after loading version {}: it generates nothing "
          "until it serves the current version",
          fleet_.id(e), served, last_weights_.version());
    }
  }
  return absl::OkStatus();
}

std::string LmLoop::WeightGroupFor(const std::vector<size_t>& loaders) {
  std::vector<std::pair<std::string, int>> members;
  for (size_t e : loaders) {
    members.emplace_back(fleet_.id(e), ctx_.controller().actors().Find(fleet_.id(e))->incarnation);
  }
  if (members != weight_group_members_) {
    weight_group_members_ = std::move(members);
    ++weight_group_epoch_;
    if (weight_group_epoch_ > 1) {
      spdlog::info("the weight group forms again with {} engine(s): weights-{}", loaders.size(),
                   weight_group_epoch_);
    }
  }
  return absl::StrCat("weights-", weight_group_epoch_);
}

bool LmLoop::Live(size_t engine) const {
  const ActorInfo* a = ctx_.controller().actors().Find(fleet_.id(engine));
  return a->state == ActorState::kReady || a->state == ActorState::kBusy;
}

bool LmLoop::TrainerBusy() const { return trainer_ != nullptr && !trainer_->in_flight().empty(); }

void LmLoop::MarkEngines() {
  const ActorRegistry& actors = ctx_.controller().actors();
  for (size_t e = 0; e < fleet_.size(); ++e) {
    if (!Live(e)) {
      fleet_.Served(e, kLostVersion);
      continue;
    }
    const int incarnation = actors.Find(fleet_.id(e))->incarnation;
    if (incarnation == incarnation_[e]) continue;
    // A replacement or a joiner starts from the job's starting checkpoint, version 0.
    incarnation_[e] = incarnation;
    fleet_.Served(e, 0);
    unloaded_[e] = fleet_.required_version() != 0;
  }
}

absl::Status LmLoop::Refresh() {
  MarkEngines();
  std::vector<size_t> fresh;
  for (size_t e = 0; e < fleet_.size(); ++e) {
    if (unloaded_[e] && Live(e)) fresh.push_back(e);
  }
  if (fresh.empty()) return absl::OkStatus();
  // A stream needs the trainer, which takes one request at a time: while it trains (the
  // asynchronous loop) new engines wait, and load once it is idle.
  if (last_weights_.location() != "inline" && TrainerBusy()) return absl::OkStatus();
  spdlog::info("{} new engine(s) load policy version {} before work", fresh.size(),
               last_weights_.version());
  for (size_t e : fresh) unloaded_[e] = false;
  return LoadOnto(fresh, nullptr);
}

absl::StatusOr<std::vector<size_t>> LmLoop::CurrentEngines() {
  while (true) {
    RETURN_IF_ERROR(Refresh());
    absl::StatusOr<std::vector<size_t>> current = fleet_.Current();
    if (current.ok()) return current;
    // While the trainer trains nothing is waited for here: the caller's groups wait for a
    // call made once it is idle (AsyncRollout::Refill).
    if (TrainerBusy()) return std::vector<size_t>();
    if (ctx_.controller().actors().LiveOfRole("rollout").empty()) {
      RETURN_IF_ERROR(ctx_.controller().AwaitLive("rollout"));
    } else if (!ReplacementArrived()) {
      // Live engines that were given the weights serve another version.
      return current;
    }
    // A replacement registered meanwhile (while the others were lost, or during the load):
    // the next Refresh gives it the weights.
  }
}

std::vector<size_t> LmLoop::ServingEngines() const {
  const ActorRegistry& actors = ctx_.controller().actors();
  std::vector<size_t> serving;
  for (size_t e = 0; e < fleet_.size(); ++e) {
    const ActorInfo* a = actors.Find(fleet_.id(e));
    const bool live = a->state == ActorState::kReady || a->state == ActorState::kBusy;
    if (live && a->incarnation == incarnation_[e] &&
        fleet_.version(e) == fleet_.required_version()) {
      serving.push_back(e);
    }
  }
  return serving;
}

bool LmLoop::ReplacementArrived() const {
  const ActorRegistry& actors = ctx_.controller().actors();
  for (size_t e = 0; e < fleet_.size(); ++e) {
    const ActorInfo* a = actors.Find(fleet_.id(e));
    const bool live = a->state == ActorState::kReady || a->state == ActorState::kBusy;
    if (live && a->incarnation != incarnation_[e]) return true;
  }
  return false;
}

std::vector<RoleRequirement> LmRoles(const JobConfig& c) {
  // Engines on the gloo path too: the loop names a new weight group when they change.
  // Joins and leaves in synchronous runs (the asynchronous loop deals to a fixed fleet).
  const bool elastic = c.rollout.max_staleness == 0;
  return {{"trainer", static_cast<int>(c.trainer.ranks), false},
          {"rollout", static_cast<int>(c.rollout.workers), c.rollout.external, true, elastic,
           static_cast<int>(WorkerCap(c.rollout.workers, c.rollout.max_workers))},
          {"reward", static_cast<int>(c.reward.workers), c.reward.external, true, elastic,
           static_cast<int>(WorkerCap(c.reward.workers, c.reward.max_workers))}};
}

void AddRewardSums(const std::map<std::string, std::vector<double>>& by_reward,
                   const std::vector<double>& totals, std::map<std::string, double>& metrics) {
  auto sums = [&](const std::string& name, const std::vector<double>& values) {
    double sum = 0, sq = 0;
    for (double v : values) {
      sum += v;
      sq += v * v;
    }
    metrics["reward/" + name + "/sum"] = sum;
    metrics["reward/" + name + "/sumsq"] = sq;
  };
  for (const auto& [name, values] : by_reward) sums(name, values);
  sums("total", totals);
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

absl::Status CheckpointLmJob(JobContext& ctx, TrainerGroup& trainer, int64_t it, int64_t version) {
  return CheckpointAfterIteration(ctx, it, {{"iteration", it}, {"policy_version", version}},
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
