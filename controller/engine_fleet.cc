#include "controller/engine_fleet.h"

#include "absl/strings/str_cat.h"

namespace rlforge {

EngineFleet::EngineFleet(std::vector<std::string> ids)
    : ids_(std::move(ids)), versions_(ids_.size(), 0) {}

absl::StatusOr<std::vector<size_t>> EngineFleet::Current() const {
  std::vector<size_t> current;
  std::string all;
  for (size_t e = 0; e < ids_.size(); ++e) {
    if (versions_[e] == required_) current.push_back(e);
    absl::StrAppend(&all, all.empty() ? "" : ", ", ids_[e], " serves ", versions_[e]);
  }
  if (ids_.empty()) return absl::FailedPreconditionError("the job has no rollout worker");
  if (current.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no rollout engine serves policy version ", required_, " (", all, ")"));
  }
  return current;
}

absl::Status EngineFleet::CheckReply(size_t engine, int64_t version) const {
  if (version == required_) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(ids_[engine], " generated with policy version ", version,
                                          " where version ", required_,
                                          " is required (synchronous mode)"));
}

std::vector<std::vector<size_t>> DealByTokens(const std::vector<int64_t>& cost, size_t engines) {
  std::vector<std::vector<size_t>> shares(engines);
  std::vector<int64_t> outstanding(engines, 0);
  for (size_t g = 0; g < cost.size() && engines > 0; ++g) {
    size_t best = 0;
    for (size_t e = 1; e < engines; ++e) {
      if (outstanding[e] < outstanding[best]) best = e;
    }
    shares[best].push_back(g);
    outstanding[best] += cost[g];
  }
  return shares;
}

}  // namespace rlforge
