// LmLoop's engine bookkeeping: which engines serve the required version, and bringing the
// engines (every one after a step; replacements and joiners when they register) to the latest
// weights. The dealing itself is RolloutDispatcher's.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/role_names.h"
#include "common/status.h"
#include "common/timing_keys.h"
#include "controller/lm_loop.h"
#include "weights/weight_transport.h"

namespace rlforge {

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
  const bool grouped = IsGroupWeightLocation(location);
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
    // call made once it is idle (RolloutDispatcher::Refill).
    if (TrainerBusy()) return std::vector<size_t>();
    if (ctx_.controller().actors().LiveOfRole(kRolloutRole).empty()) {
      RETURN_IF_ERROR(ctx_.controller().AwaitLive(kRolloutRole));
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

}  // namespace rlforge
