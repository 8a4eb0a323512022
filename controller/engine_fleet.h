// EngineFleet: the controller's view of a language-model job's rollout engines
// (rollout.max_workers slots: the rollout.workers launched or expected, and room for engines
// that join later): which version each serves, and how prompts are dealt.
//
// prompts (cost: prompt tokens + n x max_tokens) -> DealByTokens (whole groups, the engine
//   with the fewest outstanding tokens first) -> one share per current engine
// WeightsReady -> every engine loads it -> its ack (the version it serves) -> Served
//
// Invariant (synchronous mode): an engine is dealt prompts only while it serves the
// required version, the one last published to the whole fleet; an engine whose ack reports
// an older version sits out until a later load brings it level, and a reply made with any
// other version is an error. A group is never split, so its n samples share the prompt's KV
// on one engine; samples do not depend on the deal (each group's seed derives from its
// request id alone: RequestSeed in proto/lm_groups.h).
//
// Not thread-safe: the LM loop owns it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace rlforge {

class EngineFleet {
 public:
  // Engines by rank; each serves version 0 (the starting checkpoint).
  explicit EngineFleet(std::vector<std::string> ids);

  size_t size() const { return ids_.size(); }
  const std::string& id(size_t engine) const { return ids_[engine]; }
  int64_t version(size_t engine) const { return versions_[engine]; }
  int64_t required_version() const { return required_; }

  // The version every engine must serve from now on (a new publication).
  void Require(int64_t version) { required_ = version; }
  // Records the version `engine` says it serves (its load's ack).
  void Served(size_t engine, int64_t version) { versions_[engine] = version; }

  // The engines serving the required version, by rank. An error naming every engine and its
  // version when none does.
  absl::StatusOr<std::vector<size_t>> Current() const;
  // OK when `version` (what a reply of `engine` was made with) is the required version; an
  // error naming the engine and both versions otherwise.
  absl::Status CheckReply(size_t engine, int64_t version) const;

 private:
  std::vector<std::string> ids_;
  std::vector<int64_t> versions_;
  int64_t required_ = 0;
};

// Deals groups of cost `cost` (in order) over `engines` engines, each to the one with the
// fewest tokens dealt so far (ties: the lower index). Returns each engine's group indices,
// ascending. Deterministic: the same costs give the same deal.
std::vector<std::vector<size_t>> DealByTokens(const std::vector<int64_t>& cost, size_t engines);

}  // namespace rlforge
