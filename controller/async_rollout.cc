#include "controller/async_rollout.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "reward/reward_role.h"

namespace rlforge {

AsyncRollout::AsyncRollout(Controller& ctl, LmLoop& loop, const TaskText& text,
                           std::string system_prompt, SamplingParams p)
    : ctl_(ctl),
      loop_(loop),
      fleet_(loop.fleet()),
      text_(text),
      system_prompt_(std::move(system_prompt)),
      p_(p),
      engines_(loop.fleet().size()) {}

absl::Status AsyncRollout::Dispatch(int64_t batch, const std::vector<PromptExample>& examples) {
  if (batches_.count(batch)) return absl::InternalError(absl::StrCat("batch ", batch, " twice"));
  if (ctl_.actors().IdsOfRole("reward").empty()) {
    return absl::FailedPreconditionError("the job has no reward worker");
  }
  ASSIGN_OR_RETURN(std::vector<size_t> current, loop_.CurrentEngines());
  Batch& b = batches_[batch];
  b.examples = examples;
  b.groups.resize(examples.size());
  b.arrived.assign(examples.size(), false);
  b.rewards.assign(examples.size() * p_.n, std::nan(""));
  std::vector<int64_t> ids(examples.size());
  for (size_t i = 0; i < examples.size(); ++i) {
    ids[i] = next_request_++;
    where_[ids[i]] = {batch, i};
  }
  return Deal(ids, std::move(current));
}

absl::Status AsyncRollout::Refill() {
  if (homeless_.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::vector<size_t> current, loop_.CurrentEngines());
  std::vector<int64_t> ids = std::move(homeless_);
  homeless_.clear();
  return Deal(ids, std::move(current));
}

LmGroup AsyncRollout::Prompt(int64_t id) const {
  const auto [batch, i] = where_.at(id);
  LmGroup g;
  g.request_id = id;
  g.prompt = text_.Encode(system_prompt_, batches_.at(batch).examples[i].prompt);
  return g;
}

bool AsyncRollout::Live(const std::string& actor_id) const {
  const ActorInfo* a = ctl_.actors().Find(actor_id);
  return a != nullptr && (a->state == ActorState::kReady || a->state == ActorState::kBusy);
}

absl::Status AsyncRollout::Deal(const std::vector<int64_t>& ids, std::vector<size_t> engines) {
  std::erase_if(engines, [&](size_t e) { return !Live(fleet_.id(e)); });
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

absl::Status AsyncRollout::Request(size_t engine) {
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

bool AsyncRollout::Complete(int64_t batch) const {
  auto it = batches_.find(batch);
  return it != batches_.end() && it->second.scored == it->second.groups.size();
}

std::vector<uint64_t> AsyncRollout::Outstanding() const {
  std::vector<uint64_t> ids;
  for (const auto& [id, e] : generating_) ids.push_back(id);
  for (const auto& [id, s] : scoring_) ids.push_back(id);
  return ids;
}

int64_t AsyncRollout::owed_groups() const {
  int64_t owed = static_cast<int64_t>(homeless_.size());
  for (const Engine& e : engines_) owed += static_cast<int64_t>(e.owed.size());
  return owed;
}

double AsyncRollout::TakeEngineBusySeconds() {
  const double s = busy_s_;
  busy_s_ = 0;
  return s;
}

absl::Status AsyncRollout::Handle(uint64_t work_id) {
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
  if (next.second.lost) {
    spdlog::warn("{} lost while scoring {} group(s): sent again", scoring.worker,
                 scoring.groups.size());
    loop_.CountRequeued(0, 1);
    return Score(std::move(scoring));
  }
  return RecordScores(scoring, std::move(next.second));
}

absl::Status AsyncRollout::GiveBack(size_t engine) {
  Engine& e = engines_[engine];
  const std::vector<int64_t> again(e.owed.begin(), e.owed.end());
  spdlog::warn("{} lost with {} group(s) outstanding: dealt again", fleet_.id(engine),
               again.size());
  e = Engine();
  loop_.CountRequeued(static_cast<int64_t>(again.size()), 0);
  return Deal(again, loop_.ServingEngines());
}

absl::Status AsyncRollout::Generated(size_t engine, WorkOutcome o) {
  Engine& e = engines_[engine];
  const std::string& name = fleet_.id(engine);
  ASSIGN_OR_RETURN(std::vector<LmGroup> chunk, GroupsFromFrames(o.tensors, true, p_.n));
  const auto& m = o.result.metrics();
  busy_s_ += m.count("generate_s") ? m.at("generate_s") : 0;
  if (chunk.empty()) return absl::InternalError(absl::StrCat(name, " returned no group"));
  for (const LmGroup& grp : chunk) {
    if (e.owed.erase(grp.request_id) == 0) {
      return absl::InternalError(absl::StrCat(name, " returned request ", grp.request_id,
                                              ", which it does not owe (unknown or repeated)"));
    }
  }
  // The next chunk before scoring this one; an engine lost meanwhile gives its share back.
  if (!e.owed.empty()) RETURN_IF_ERROR(Live(name) ? Request(engine) : GiveBack(engine));
  Scoring scoring;
  std::vector<reward::Sample> samples;
  for (LmGroup& grp : chunk) {
    auto w = where_.find(grp.request_id);
    const auto [batch, i] = w->second;
    where_.erase(w);
    Batch& b = batches_.at(batch);
    b.arrived[i] = true;
    ++b.generated;
    for (const LmSample& s : grp.samples) {
      b.tokens += static_cast<double>(s.tokens.size());
      reward::Sample rs;
      rs.prompt = b.examples[i].prompt;
      rs.response = text_.Response(s);
      rs.answer = b.examples[i].answer;
      rs.response_tokens = static_cast<int64_t>(s.tokens.size());
      samples.push_back(std::move(rs));
    }
    b.groups[i] = std::move(grp);
    scoring.groups.push_back({batch, i});
  }
  // The engine's preemptions and tokens belong to the batch of the chunk's first group.
  Batch& first = batches_.at(scoring.groups.front().first);
  first.preemptions += m.count("preemptions") ? m.at("preemptions") : 0;
  reward::SamplesToProto(samples, &scoring.task);
  return Score(std::move(scoring));
}

absl::Status AsyncRollout::Score(Scoring s) {
  std::vector<std::string> live = ctl_.actors().LiveOfRole("reward");
  if (live.empty()) {
    RETURN_IF_ERROR(ctl_.AwaitLive("reward"));
    live = ctl_.actors().LiveOfRole("reward");
  }
  // Round-robin: every chunk is about the same work, so this balances the load.
  s.worker = live[next_rewarder_++ % live.size()];
  proto::WorkRequest score;
  *score.mutable_score() = s.task;
  ASSIGN_OR_RETURN(uint64_t sid, ctl_.Submit(s.worker, std::move(score)));
  scoring_[sid] = std::move(s);
  return absl::OkStatus();
}

absl::Status AsyncRollout::RecordScores(const Scoring& s, WorkOutcome o) {
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
      for (const auto& pr : scores.rewards) {
        std::vector<double>& v = b.by_reward[pr.name];
        v.resize(b.groups.size() * n, 0.0);
        v[i * n + j] = pr.scores[q].value;
      }
    }
    ++b.scored;
  }
  return absl::OkStatus();
}

absl::StatusOr<Scored> AsyncRollout::Take(int64_t batch) {
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
