#include "controller/actor_placement.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "controller/controller.h"

namespace rlforge {

absl::StatusOr<std::vector<RoleSlots>> PlacementSlots(const JobConfig& config,
                                                      const std::vector<RoleRequirement>& roles) {
  const PlacementOptions& p = config.launch.placement;
  const std::map<std::string, const RolePlacementOptions*> sections = {
      {kTrainerRole, &p.trainer}, {kRolloutRole, &p.rollout}, {kRewardRole, &p.reward}};
  std::vector<RoleSlots> out;
  for (const RoleRequirement& r : roles) {
    if (r.external || r.count == 0) continue;
    RoleSlots s;
    s.role = r.role;
    s.count = r.count;
    s.packed = r.role == kTrainerRole;
    s.key = "launch.placement." + r.role;
    if (auto it = sections.find(r.role); it != sections.end()) {
      s.nodes = it->second->nodes;
      s.per_node = it->second->per_node;
      s.gpus = it->second->gpus;
    }
    out.push_back(std::move(s));
  }
  // A section for a role that this job launches none of would do nothing.
  for (const auto& [role, section] : sections) {
    if (*section == RolePlacementOptions{}) continue;
    const bool placed = std::any_of(out.begin(), out.end(),
                                    [&, r = role](const RoleSlots& s) { return s.role == r; });
    if (!placed) {
      return absl::InvalidArgumentError(absl::StrCat("launch.placement.", role, ": job.algorithm ",
                                                     config.job.algorithm->name, " launches no ",
                                                     role, " actors here; remove this section"));
    }
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> JobNodes(const JobConfig& config,
                                                  std::vector<std::string> allocation) {
  const int64_t wanted = config.launch.nodes;
  if (wanted == 0) return allocation;
  if (static_cast<int64_t>(allocation.size()) < wanted) {
    return absl::InvalidArgumentError(
        absl::StrCat("launch.nodes: the job wants ", wanted, " nodes, but the allocation has ",
                     allocation.size(), " (", absl::StrJoin(allocation, ","), ")"));
  }
  allocation.resize(static_cast<size_t>(wanted));
  return allocation;
}

absl::StatusOr<std::map<std::string, ActorPlace>> PlaceActors(
    const std::vector<RoleSlots>& slots, const std::vector<std::string>& nodes) {
  std::map<std::string, ActorPlace> out;
  for (const RoleSlots& s : slots) {
    auto placed = PlaceRole(s, static_cast<int>(nodes.size()));
    if (!placed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(placed.status().message(), " (nodes: ", absl::StrJoin(nodes, ","), ")"));
    }
    for (int rank = 0; rank < s.count; ++rank) {
      out[absl::StrCat(s.role, "-", rank)] = ActorPlace{nodes[(*placed)[rank]], s.gpus};
    }
  }
  return out;
}

}  // namespace rlforge
