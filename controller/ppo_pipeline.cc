// PpoPipeline: the control-PPO loop with rollout.max_staleness k >= 1. While the trainer
// trains batch b, the rollout workers step batches b+1 .. b+k with the weights they hold.
//
// units (batch j, worker slot s) -> an idle worker loads the newest version if it lacks it,
//   then steps the earliest queued unit of its own slot (or of a lost worker's slot) ->
//   rewards scaled on arrival (per worker, in stepping order) -> batch b complete ->
//   admission -> GAE -> train step b (in flight while workers step) -> version V_b + 1
//
// Throttle: batch j's units are queued only once batch j - k is the next to train, and a
// worker always loads the newest version before its next unit, so every unit of batch j is
// stepped by version >= V_j - k (V_j = the version batch j trains: one step per iteration).
// Admission (the guard): a unit whose version is outside [V_b - k, V_b] is dropped, counted
// in stale_batches_discarded and dealt again; the trainer refuses such a batch too.
// Shared-memory weights keep two versions (by parity): no load of an older version may still
// be in flight when a train step publishes the next one (SettleLoads).
//
// Not thread-safe: PpoAlgorithm::RunPipelined owns it for the run.
#include <algorithm>
#include <deque>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/logging.h"
#include "common/role_names.h"
#include "common/status.h"
#include "controller/ppo_algorithm.h"

namespace rlforge {

class PpoPipeline {
 public:
  PpoPipeline(PpoAlgorithm& algo, Controller& c, const std::string& trainer, int64_t iterations)
      : a_(algo),
        c_(c),
        trainer_(trainer),
        k_(algo.config_.rollout.max_staleness),
        iterations_(iterations),
        busy_(algo.workers_.size(), false) {}

  absl::Status Run(JobContext& ctx, PpoAlgorithm::Progress* p);

 private:
  struct Unit {
    int64_t batch = 0;
    size_t slot = 0;
    bool operator<(const Unit& o) const {
      return batch != o.batch ? batch < o.batch : slot < o.slot;
    }
  };
  struct Pending {  // one batch's worker batches, by slot
    std::vector<WorkOutcome> units;
    std::vector<std::vector<float>> rewards;  // scaled
    std::vector<bool> have;
    std::vector<size_t> producers;  // the slot that stepped each unit
  };
  struct InFlight {
    size_t worker = 0;
    std::optional<int64_t> load;  // the version a load brings, or a rollout of `unit`
    Unit unit;
  };

  int64_t VersionOf(int64_t batch) const { return v0_ + (batch - it0_); }
  size_t Workers() const { return a_.workers_.size(); }
  void Open(int64_t batch);
  void Requeue(const Unit& u);
  bool Complete(int64_t batch) const;
  // Drops the units of `batch` outside [version - k, version] (dealt again); how many.
  int64_t Admit(int64_t batch, int64_t version);
  // Submits a load or a rollout to every usable idle worker.
  absl::Status Dispatch();
  // Readies replacements, dispatches, then handles the next work to finish of those in flight
  // and `also`: true when that was `also` (its outcome in *out).
  absl::StatusOr<bool> Next(std::optional<uint64_t> also, WorkOutcome* out);
  absl::Status Arrived(const InFlight& f, WorkOutcome o);
  // Waits until no load of a version older than the newest is in flight.
  absl::Status SettleLoads();
  // Waits for every work in flight, dispatching nothing more (the run ends).
  absl::Status Drain();
  int64_t RolloutsInFlight() const;
  // version_lag/<d>, version_lag_mean and stale_batches_discarded of the batch `b`.
  void RecordLag(const PpoAlgorithm::TrainBatch& b, IterationRecord* rec) const;

  PpoAlgorithm& a_;
  Controller& c_;
  const std::string trainer_;
  const int64_t k_, iterations_;
  int64_t it0_ = 1, v0_ = 0, opened_ = 0;
  std::deque<Unit> queue_;  // sorted by (batch, slot)
  std::map<int64_t, Pending> pending_;
  std::map<uint64_t, InFlight> in_flight_;
  std::vector<bool> busy_;
  bool draining_ = false;
  bool training_ = false;     // a train step is in flight
  int64_t during_train_ = 0;  // rollouts in flight while it was
  int64_t discarded_ = 0;     // this iteration's
  double stepping_s_ = 0;     // rollout seconds returned since the last iteration ended
};

void PpoPipeline::Open(int64_t batch) {
  Pending& p = pending_[batch];
  p.units.resize(Workers());
  p.rewards.resize(Workers());
  p.have.assign(Workers(), false);
  p.producers.assign(Workers(), 0);
  for (size_t s = 0; s < Workers(); ++s) queue_.push_back({batch, s});
}

void PpoPipeline::Requeue(const Unit& u) {
  queue_.insert(std::lower_bound(queue_.begin(), queue_.end(), u), u);
}

bool PpoPipeline::Complete(int64_t batch) const {
  const Pending& p = pending_.at(batch);
  return std::all_of(p.have.begin(), p.have.end(), [](bool h) { return h; });
}

int64_t PpoPipeline::Admit(int64_t batch, int64_t version) {
  Pending& p = pending_.at(batch);
  int64_t dropped = 0;
  for (size_t s = 0; s < Workers(); ++s) {
    const int64_t v = p.units[s].result.policy_version();
    if (v >= version - k_ && v <= version) continue;
    spdlog::warn("batch {} slot {}: policy version {} is outside [{}, {}]: dropped, dealt again",
                 batch, s, v, version - k_, version);
    p.have[s] = false;
    Requeue({batch, s});
    ++dropped;
  }
  discarded_ += dropped;
  return dropped;
}

absl::Status PpoPipeline::Dispatch() {
  const int64_t newest = a_.last_weights_.version();
  for (size_t w = 0; w < Workers() && !draining_; ++w) {
    if (busy_[w] || !a_.Usable(c_, w)) continue;
    if (a_.served_[w] < newest) {
      ASSIGN_OR_RETURN(uint64_t id, a_.SubmitLoad(c_, w));
      in_flight_[id] = {w, newest, {}};
      busy_[w] = true;
      continue;
    }
    auto it = std::find_if(queue_.begin(), queue_.end(), [&](const Unit& u) {
      return (u.slot == w || !a_.Usable(c_, u.slot)) && a_.served_[w] >= VersionOf(u.batch) - k_;
    });
    if (it == queue_.end()) continue;
    proto::WorkRequest req;
    req.mutable_rollout()->set_num_steps(
        static_cast<int32_t>(a_.config_.rollout.steps_per_iteration));
    ASSIGN_OR_RETURN(uint64_t id, c_.Submit(a_.workers_[w], std::move(req)));
    if (training_) ++during_train_;
    in_flight_[id] = {w, std::nullopt, *it};
    busy_[w] = true;
    queue_.erase(it);
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> PpoPipeline::Next(std::optional<uint64_t> also, WorkOutcome* out) {
  if (!draining_) RETURN_IF_ERROR(a_.PrepareReplacements(c_));
  RETURN_IF_ERROR(Dispatch());
  std::vector<uint64_t> ids;
  for (const auto& [id, f] : in_flight_) ids.push_back(id);
  if (also) ids.push_back(*also);
  if (ids.empty()) {  // every worker lost: wait for a replacement
    RETURN_IF_ERROR(c_.AwaitLive(kRolloutRole));
    RETURN_IF_ERROR(c_.Pump(0));
    return false;
  }
  ASSIGN_OR_RETURN(auto ready, c_.AwaitNext(ids));
  const uint64_t id = ids[ready.first];
  if (also && id == *also) {
    if (ready.second.lost) {
      return absl::UnavailableError(
          absl::StrCat(trainer_, " was lost during its train step: ", ready.second.result.error()));
    }
    *out = std::move(ready.second);
    return true;
  }
  const InFlight f = in_flight_.at(id);
  in_flight_.erase(id);
  busy_[f.worker] = false;
  RETURN_IF_ERROR(Arrived(f, std::move(ready.second)));
  return false;
}

absl::Status PpoPipeline::Arrived(const InFlight& f, WorkOutcome o) {
  const std::string& worker = a_.workers_[f.worker];
  if (o.lost) {  // PrepareReplacements sets a replacement up; a lost rollout is dealt again
    if (f.load) return absl::OkStatus();
    spdlog::warn("{} lost during its rollout: batch {} slot {} dealt again", worker, f.unit.batch,
                 f.unit.slot);
    ++a_.requeued_batches_;
    Requeue(f.unit);
    return absl::OkStatus();
  }
  if (f.load) {
    if (o.result.weights().version() != *f.load) {
      return absl::InternalError(absl::StrCat(
          worker, " loaded version ", o.result.weights().version(), " instead of ", *f.load));
    }
    a_.served_[f.worker] = *f.load;
    return absl::OkStatus();
  }
  if (o.result.policy_version() != a_.served_[f.worker]) {
    return absl::InternalError(absl::StrCat(worker, " stepped batch ", f.unit.batch,
                                            " with policy version ", o.result.policy_version(),
                                            " but had loaded version ", a_.served_[f.worker]));
  }
  ASSIGN_OR_RETURN(std::vector<float> rewards, a_.ScaledRewards(o, f.worker));
  a_.stepped_[f.worker] = true;
  stepping_s_ += o.seconds;
  if (draining_) return absl::OkStatus();
  Pending& p = pending_.at(f.unit.batch);
  p.units[f.unit.slot] = std::move(o);
  p.rewards[f.unit.slot] = std::move(rewards);
  p.have[f.unit.slot] = true;
  p.producers[f.unit.slot] = f.worker;
  return absl::OkStatus();
}

absl::Status PpoPipeline::SettleLoads() {
  auto stale_load = [&] {
    for (const auto& [id, f] : in_flight_) {
      if (f.load && *f.load < a_.last_weights_.version()) return true;
    }
    return false;
  };
  while (stale_load()) RETURN_IF_ERROR(Next(std::nullopt, nullptr).status());
  return absl::OkStatus();
}

absl::Status PpoPipeline::Drain() {
  draining_ = true;
  while (!in_flight_.empty()) RETURN_IF_ERROR(Next(std::nullopt, nullptr).status());
  return absl::OkStatus();
}

void PpoPipeline::RecordLag(const PpoAlgorithm::TrainBatch& b, IterationRecord* rec) const {
  double lag_sum = 0;
  for (int64_t d = 0; d <= k_; ++d) {
    const double rows = d < static_cast<int64_t>(b.lag_rows.size()) ? b.lag_rows[d] : 0;
    rec->metrics[absl::StrCat("version_lag/", d)] = rows / static_cast<double>(b.rows());
    lag_sum += rows * static_cast<double>(d);
  }
  rec->metrics["version_lag_mean"] = lag_sum / static_cast<double>(b.rows());
  rec->metrics["stale_batches_discarded"] = static_cast<double>(discarded_);
}

int64_t PpoPipeline::RolloutsInFlight() const {
  return std::count_if(in_flight_.begin(), in_flight_.end(),
                       [](const auto& e) { return !e.second.load.has_value(); });
}

absl::Status PpoPipeline::Run(JobContext& ctx, PpoAlgorithm::Progress* p) {
  it0_ = p->iteration + 1;
  v0_ = p->version;
  opened_ = p->iteration;
  const int64_t batch_steps = static_cast<int64_t>(Workers()) * a_.config_.env.num_envs *
                              a_.config_.rollout.steps_per_iteration;
  Stopwatch t_iter;  // an iteration runs from the end of the one before
  for (int64_t it = it0_; it <= iterations_; ++it) {
    IterationRecord rec;
    rec.step = it;
    while (opened_ < std::min(iterations_, it + k_)) Open(++opened_);
    const Stopwatch t_wait;
    discarded_ = 0;
    do {
      while (!Complete(it)) RETURN_IF_ERROR(Next(std::nullopt, nullptr).status());
    } while (Admit(it, p->version) > 0);
    rec.timings["rollout_s"] = t_wait.Seconds();
    RETURN_IF_ERROR(Dispatch());  // the workers whose batch just came back step on

    const Stopwatch t_gae;
    PpoAlgorithm::TrainBatch b;
    Pending& batch = pending_.at(it);
    int64_t oldest = p->version;
    for (size_t s = 0; s < Workers(); ++s) {
      RETURN_IF_ERROR(
          a_.AddRollout(batch.units[s], batch.rewards[s], batch.producers[s], p->version, &b, p));
      oldest = std::min(oldest, batch.units[s].result.policy_version());
    }
    pending_.erase(it);
    rec.timings["gae_s"] = t_gae.Seconds();
    if (b.rows() == 0) return absl::InternalError("a rollout produced no valid samples");

    RETURN_IF_ERROR(SettleLoads());
    const Stopwatch t_train;
    ASSIGN_OR_RETURN(uint64_t sid, a_.SubmitTrain(c_, trainer_, it, iterations_, oldest, b));
    training_ = true;
    during_train_ = RolloutsInFlight();
    WorkOutcome trained;
    bool done = false;
    while (!done) {
      ASSIGN_OR_RETURN(done, Next(sid, &trained));
    }
    training_ = false;
    rec.metrics["rollouts_during_train"] = static_cast<double>(during_train_);
    rec.timings["train_s"] = t_train.Seconds();
    // Workers load the new version between their rollouts (Dispatch).
    a_.last_weights_ = trained.result.weights();
    a_.last_frames_ = std::move(trained.tensors);
    p->version = trained.result.weights().version();

    a_.RecordIteration(trained, b, p, &rec);
    RecordLag(b, &rec);
    const double iter_s = t_iter.Lap();
    rec.timings["iteration_s"] = iter_s;
    rec.timings["steps_per_s"] = static_cast<double>(batch_steps) / iter_s;
    a_.IdleShares(rec.timings["train_s"], stepping_s_, iter_s, &rec);
    stepping_s_ = 0;
    RETURN_IF_ERROR(ctx.EndIteration(rec));
    p->iteration = it;
    if (p->solved && a_.config_.ppo.stop_when_solved) break;
  }
  return Drain();
}

absl::Status PpoAlgorithm::RunPipelined(JobContext& ctx, const std::string& trainer,
                                        int64_t iterations, Progress* p) {
  PpoPipeline pipeline(*this, ctx.controller(), trainer, iterations);
  return pipeline.Run(ctx, p);
}

}  // namespace rlforge
