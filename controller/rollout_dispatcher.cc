#include "controller/rollout_dispatcher.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/role_names.h"
#include "common/status.h"
#include "reward/reward_role.h"

namespace rlforge {

namespace {

double MetricOr(const proto::WorkResult& r, const std::string& key, double fallback) {
  auto it = r.metrics().find(key);
  return it == r.metrics().end() ? fallback : it->second;
}

}  // namespace

RolloutDispatcher::RolloutDispatcher(LmLoop& loop, SamplingParams p, int64_t max_staleness)
    : loop_(loop),
      ctl_(loop.ctx().controller()),
      fleet_(loop.fleet()),
      p_(p),
      max_staleness_(max_staleness),
      engines_(loop.fleet().size()) {}

absl::Status RolloutDispatcher::Dispatch(int64_t batch, const std::vector<PromptExample>& examples,
                                         const std::vector<int64_t>& request_ids) {
  if (batches_.count(batch)) return absl::InternalError(absl::StrCat("batch ", batch, " twice"));
  if (request_ids.size() != examples.size()) {
    return absl::InternalError(absl::StrCat("batch ", batch, ": ", examples.size(), " examples, ",
                                            request_ids.size(), " request ids"));
  }
  if (ctl_.actors().IdsOfRole(kRewardRole).empty()) {
    return absl::FailedPreconditionError("the job has no reward worker");
  }
  // Below a role's minimum the batch waits (joins, replacements) rather than starting.
  const JobConfig& c = loop_.ctx().config();
  RETURN_IF_ERROR(
      ctl_.AwaitLive(kRolloutRole, static_cast<int>(c.rollout.min_workers), "rollout.min_workers"));
  RETURN_IF_ERROR(
      ctl_.AwaitLive(kRewardRole, static_cast<int>(c.reward.min_workers), "reward.min_workers"));
  for (int64_t id : request_ids) {
    if (where_.count(id)) {
      return absl::InternalError(absl::StrCat("request id ", id, " is in flight"));
    }
  }
  for (size_t i = 0; i < request_ids.size(); ++i) where_[request_ids[i]] = {batch, i};
  Batch& b = batches_[batch];
  b.examples = examples;
  b.request_ids = request_ids;
  b.groups.resize(examples.size());
  b.arrived.assign(examples.size(), false);
  b.rewards.assign(examples.size() * p_.n, std::nan(""));
  b.engine_s.assign(fleet_.size(), 0.0);
  b.engine_groups.assign(fleet_.size(), 0);
  return Deal(request_ids);
}

absl::Status RolloutDispatcher::Refill() {
  if (homeless_.empty()) return absl::OkStatus();
  std::vector<int64_t> ids = std::move(homeless_);
  homeless_.clear();
  return Deal(ids);
}

absl::Status RolloutDispatcher::ServeUntil(const std::function<bool()>& done) {
  while (!done()) {
    RETURN_IF_ERROR(Refill());
    const std::vector<uint64_t> ids = Outstanding();
    if (ids.empty()) {
      // Given back while no engine served: CurrentEngines waits for one in the next Refill.
      if (!homeless_.empty()) continue;
      return absl::InternalError("the rollout waits on a batch nothing generates");
    }
    ASSIGN_OR_RETURN(const size_t k, ctl_.AwaitReady(ids));
    RETURN_IF_ERROR(Handle(ids[k]));
  }
  return absl::OkStatus();
}

absl::Status RolloutDispatcher::ServeUntilReady(const std::vector<uint64_t>& others) {
  while (true) {
    std::vector<uint64_t> ids = Outstanding();
    const size_t own = ids.size();
    ids.insert(ids.end(), others.begin(), others.end());
    ASSIGN_OR_RETURN(const size_t k, ctl_.AwaitReady(ids));
    if (k >= own) return absl::OkStatus();
    RETURN_IF_ERROR(Handle(ids[k]));
  }
}

LmGroup RolloutDispatcher::Prompt(int64_t id) const {
  const auto [batch, i] = where_.at(id);
  LmGroup g;
  g.request_id = id;
  g.prompt = loop_.text().Encode(loop_.ctx().config().data.system_prompt,
                                 batches_.at(batch).examples[i].prompt);
  return g;
}

bool RolloutDispatcher::Live(const std::string& actor_id) const {
  const ActorInfo* a = ctl_.actors().Find(actor_id);
  return a != nullptr && (a->state == ActorState::kReady || a->state == ActorState::kBusy);
}

absl::Status RolloutDispatcher::Deal(const std::vector<int64_t>& ids) {
  if (ids.empty()) return absl::OkStatus();
  // CurrentEngines may serve the controller (loading a replacement), and an engine can be
  // declared lost meanwhile: deal only to those still serving once it returns.
  ASSIGN_OR_RETURN(std::vector<size_t> engines, loop_.CurrentEngines());
  const std::vector<size_t> serving = loop_.ServingEngines();
  std::erase_if(engines, [&](size_t e) {
    return std::find(serving.begin(), serving.end(), e) == serving.end();
  });
  if (engines.empty()) {
    homeless_.insert(homeless_.end(), ids.begin(), ids.end());
    return absl::OkStatus();
  }
  std::vector<LmGroup> prompts;
  std::vector<int64_t> cost;
  for (int64_t id : ids) {
    prompts.push_back(Prompt(id));
    cost.push_back(static_cast<int64_t>(prompts.back().prompt.size()) + p_.n * p_.max_tokens);
  }
  const std::vector<std::vector<size_t>> shares = DealByTokens(cost, engines.size());
  for (size_t k = 0; k < engines.size(); ++k) {
    Engine& e = engines_[engines[k]];
    for (size_t i : shares[k]) {
      e.owed.insert(prompts[i].request_id);
      e.queued.push_back(std::move(prompts[i]));
    }
    if (!e.work && !shares[k].empty()) RETURN_IF_ERROR(Request(engines[k]));
  }
  return absl::OkStatus();
}

absl::Status RolloutDispatcher::Request(size_t engine) {
  // Declared lost since its groups were queued (the controller was served meanwhile): they
  // go to the engines still serving, as a lost engine's do.
  if (!Live(fleet_.id(engine))) return GiveBack(engine);
  Engine& e = engines_[engine];
  proto::WorkRequest gen;
  proto::LmGenerate* lg = gen.mutable_lm_generate();
  lg->set_n(p_.n);
  lg->set_temperature(p_.temperature);
  lg->set_top_p(p_.top_p);
  lg->set_top_k(p_.top_k);
  lg->set_max_tokens(p_.max_tokens);
  lg->set_seed(p_.seed);
  lg->set_min_groups(std::min<int64_t>(p_.stream_groups, static_cast<int64_t>(e.owed.size())));
  std::vector<LmGroup> send = std::move(e.queued);
  e.queued.clear();
  ASSIGN_OR_RETURN(uint64_t id,
                   ctl_.Submit(fleet_.id(engine), std::move(gen), GroupsToFrames(send, false)));
  e.work = id;
  generating_[id] = engine;
  return absl::OkStatus();
}

bool RolloutDispatcher::Complete(int64_t batch) const {
  auto it = batches_.find(batch);
  return it != batches_.end() && it->second.scored == it->second.groups.size();
}

std::vector<uint64_t> RolloutDispatcher::Outstanding() const {
  std::vector<uint64_t> ids;
  for (const auto& [id, e] : generating_) ids.push_back(id);
  for (const auto& [id, s] : scoring_) ids.push_back(id);
  return ids;
}

int64_t RolloutDispatcher::owed_groups() const {
  int64_t owed = static_cast<int64_t>(homeless_.size());
  for (const Engine& e : engines_) owed += static_cast<int64_t>(e.owed.size());
  return owed;
}

double RolloutDispatcher::TakeEngineBusySeconds() {
  const double s = busy_s_;
  busy_s_ = 0;
  return s;
}

std::vector<InFlightBatch> RolloutDispatcher::InFlight() const {
  std::vector<InFlightBatch> out;
  for (const auto& [batch, b] : batches_) out.push_back({batch, b.request_ids});
  return out;
}

absl::Status RolloutDispatcher::Handle(uint64_t work_id) {
  if (auto g = generating_.find(work_id); g != generating_.end()) {
    const size_t engine = g->second;
    generating_.erase(g);
    engines_[engine].work.reset();
    ASSIGN_OR_RETURN(auto next, ctl_.AwaitNext({work_id}));
    if (next.second.lost) return GiveBack(engine);
    return Generated(engine, std::move(next.second));
  }
  auto s = scoring_.find(work_id);
  if (s == scoring_.end()) return absl::InternalError(absl::StrCat("unknown work ", work_id));
  Scoring scoring = std::move(s->second);
  scoring_.erase(s);
  ASSIGN_OR_RETURN(auto next, ctl_.AwaitNext({work_id}));
  return OnScored(std::move(scoring), std::move(next.second));
}

absl::Status RolloutDispatcher::GiveBack(size_t engine) {
  Engine& e = engines_[engine];
  const std::vector<int64_t> again(e.owed.begin(), e.owed.end());
  // An engine that left on purpose handed them back: not a fault.
  const ActorInfo* a = ctl_.actors().Find(fleet_.id(engine));
  const bool left = a != nullptr && a->state == ActorState::kLeft;
  spdlog::log(left ? spdlog::level::info : spdlog::level::warn,
              "{} {} with {} group(s) outstanding: dealt again", fleet_.id(engine),
              left ? "left" : "lost", again.size());
  e = Engine();
  if (!left) loop_.CountRequeued(static_cast<int64_t>(again.size()), 0);
  return Deal(again);
}

absl::Status RolloutDispatcher::Generated(size_t engine, WorkOutcome o) {
  const std::string& name = fleet_.id(engine);
  if (max_staleness_ == 0) RETURN_IF_ERROR(fleet_.CheckReply(engine, o.result.policy_version()));
  ASSIGN_OR_RETURN(std::vector<LmGroup> chunk, GroupsFromFrames(o.tensors, true, p_.n));
  if (chunk.empty()) return absl::InternalError(absl::StrCat(name, " returned no group"));
  Engine& e = engines_[engine];
  for (const LmGroup& grp : chunk) {
    if (e.owed.erase(grp.request_id) == 0) {
      return absl::InternalError(absl::StrCat(name, " returned unknown or repeated request ",
                                              grp.request_id, " (one it does not owe)"));
    }
  }
  // The chunk's figures count toward the batch of its first group.
  Batch& first = batches_.at(where_.at(chunk.front().request_id).first);
  const double busy = MetricOr(o.result, "generate_s", 0);
  first.tokens += MetricOr(o.result, "generated_tokens", 0);
  first.preemptions += MetricOr(o.result, "preemptions", 0);
  first.engine_s[engine] += busy;
  busy_s_ += busy;
  // The next chunk before scoring this one; an engine lost meanwhile gives its share back.
  if (!e.owed.empty()) RETURN_IF_ERROR(Live(name) ? Request(engine) : GiveBack(engine));
  ASSIGN_OR_RETURN(Scoring scoring, Route(engine, std::move(chunk)));
  return Score(std::move(scoring));
}

absl::StatusOr<RolloutDispatcher::Scoring> RolloutDispatcher::Route(size_t engine,
                                                                    std::vector<LmGroup> chunk) {
  Scoring scoring;
  std::vector<reward::Sample> samples;
  for (LmGroup& grp : chunk) {
    auto w = where_.find(grp.request_id);
    const auto [batch, i] = w->second;
    where_.erase(w);
    Batch& b = batches_.at(batch);
    b.arrived[i] = true;
    ++b.engine_groups[engine];
    for (const LmSample& s : grp.samples) {
      reward::Sample rs;
      rs.prompt = b.examples[i].prompt;
      rs.response = loop_.text().Response(s);
      rs.answer = b.examples[i].answer;
      rs.response_tokens = static_cast<int64_t>(s.tokens.size());
      samples.push_back(std::move(rs));
    }
    b.groups[i] = std::move(grp);
    scoring.groups.push_back({batch, i});
  }
  reward::SamplesToProto(samples, &scoring.task);
  return scoring;
}

absl::Status RolloutDispatcher::Score(Scoring s) {
  std::vector<std::string> live = ctl_.actors().LiveOfRole(kRewardRole);
  if (live.empty()) {
    RETURN_IF_ERROR(ctl_.AwaitLive(kRewardRole));
    live = ctl_.actors().LiveOfRole(kRewardRole);
  }
  // Round-robin: every chunk is about the same work, so this balances the load.
  s.worker = live[next_rewarder_++ % live.size()];
  proto::WorkRequest score;
  *score.mutable_score() = s.task;
  ASSIGN_OR_RETURN(uint64_t sid, ctl_.Submit(s.worker, std::move(score)));
  scoring_[sid] = std::move(s);
  return absl::OkStatus();
}

absl::Status RolloutDispatcher::OnScored(Scoring s, WorkOutcome o) {
  if (o.lost) {
    spdlog::log(o.left ? spdlog::level::info : spdlog::level::warn,
                "{} {} while scoring {} group(s): sent again", s.worker, o.left ? "left" : "lost",
                s.groups.size());
    if (!o.left) loop_.CountRequeued(0, 1);
    return Score(std::move(s));
  }
  return RecordScores(s, o);
}

absl::Status RolloutDispatcher::RecordScores(const Scoring& s, const WorkOutcome& o) {
  const int64_t n = p_.n;
  ASSIGN_OR_RETURN(reward::BatchScores scores,
                   reward::ScoresFromProto(o.result.score(), s.groups.size() * n));
  for (size_t k = 0; k < s.groups.size(); ++k) {
    const auto [batch, i] = s.groups[k];
    Batch& b = batches_.at(batch);
    for (int64_t j = 0; j < n; ++j) {
      const size_t q = k * n + j;
      if (!scores.ok[q]) {
        return absl::InternalError(absl::StrCat(
            s.worker, " could not score sample ", j, " of prompt '", b.examples[i].prompt,
            "': ", scores.error[q], " (see logs/", s.worker, ".log)"));
      }
      b.rewards[i * n + j] = scores.total[q];
      // Per reward, each sample's score by its place in the batch: the sums run in example
      // order, so they do not depend on how chunks arrived.
      for (const auto& pr : scores.rewards) {
        std::vector<double>& v = b.by_reward[pr.name];
        v.resize(b.groups.size() * n, 0.0);
        v[i * n + j] = pr.scores[q].value;
      }
    }
    ++b.scored;
  }
  // The reward worker's busy time (reward/reward_role.cc).
  batches_.at(s.groups.front().first).reward_s += MetricOr(o.result, "reward/time_s", 0);
  return absl::OkStatus();
}

absl::StatusOr<Scored> RolloutDispatcher::Take(int64_t batch) {
  if (!Complete(batch)) {
    return absl::InternalError(absl::StrCat("batch ", batch, " is not complete"));
  }
  Batch b = std::move(batches_.at(batch));
  batches_.erase(batch);
  Scored out;
  out.groups = std::move(b.groups);
  out.rewards = std::move(b.rewards);
  out.examples = std::move(b.examples);
  AddRewardSums(b.by_reward, out.rewards, out.metrics);
  out.metrics["generated_tokens"] = b.tokens;
  out.metrics["engine_preemptions"] = b.preemptions;
  double busiest = 0;
  for (size_t e = 0; e < fleet_.size(); ++e) {
    // An elastic slot nobody ever joined has nothing to report.
    if (ctl_.actors().Find(fleet_.id(e))->incarnation == 0) continue;
    const std::string prefix = absl::StrCat("rollout/", e, "/");
    out.metrics[prefix + "version"] = static_cast<double>(fleet_.version(e));
    out.metrics[prefix + "groups"] = static_cast<double>(b.engine_groups[e]);
    out.timings[prefix + "generate_s"] = b.engine_s[e];
    busiest = std::max(busiest, b.engine_s[e]);
  }
  out.timings["generate_s"] = busiest;
  out.timings["reward_s"] = b.reward_s;
  return out;
}

int64_t AdmitFresh(int64_t version, int64_t k, Scored& s, std::vector<double>& lag_tokens) {
  lag_tokens.resize(static_cast<size_t>(k) + 1, 0.0);
  const size_t n = s.groups.empty() ? 0 : s.groups.front().samples.size();
  Scored kept;
  int64_t removed = 0;
  for (size_t i = 0; i < s.groups.size(); ++i) {
    bool fresh = true;
    for (const LmSample& smp : s.groups[i].samples) {
      for (int64_t v : smp.versions) fresh = fresh && v <= version && version - v <= k;
    }
    if (!fresh) {
      ++removed;
      continue;
    }
    for (const LmSample& smp : s.groups[i].samples) {
      for (int64_t v : smp.versions) lag_tokens[static_cast<size_t>(version - v)] += 1;
    }
    kept.groups.push_back(std::move(s.groups[i]));
    kept.examples.push_back(std::move(s.examples[i]));
    kept.rewards.insert(kept.rewards.end(), s.rewards.begin() + i * n,
                        s.rewards.begin() + (i + 1) * n);
  }
  s.groups = std::move(kept.groups);
  s.examples = std::move(kept.examples);
  s.rewards = std::move(kept.rewards);
  return removed;
}

}  // namespace rlforge
