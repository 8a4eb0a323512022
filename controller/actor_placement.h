// The job's placement: launch.placement and the algorithm's roles, as launch/placement.h
// slots, and the node each launched actor runs on (launch.backend slurm).
//
// JobConfig + Algorithm::Roles() -> RoleSlots -> PlaceRole per role -> actor id -> node name
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "config/job_config.h"
#include "controller/algorithm.h"
#include "launch/placement.h"

namespace rlforge {

// One RoleSlots per launched role (external roles are nobody's to place). Trainer ranks are
// packed; roles without a launch.placement section (echo) go round-robin over every node.
// A placement section for a role the job launches none of is an error.
absl::StatusOr<std::vector<RoleSlots>> PlacementSlots(const JobConfig& config,
                                                      const std::vector<RoleRequirement>& roles);

// What the job places on: `allocation` cut to launch.nodes when set (an error if the
// allocation is smaller).
absl::StatusOr<std::vector<std::string>> JobNodes(const JobConfig& config,
                                                  std::vector<std::string> allocation);

struct ActorPlace {
  std::string node;  // Slurm node name
  int64_t gpus = 0;
};

// Actor id ("rollout-1") -> where it runs, for every launched actor.
absl::StatusOr<std::map<std::string, ActorPlace>> PlaceActors(
    const std::vector<RoleSlots>& slots, const std::vector<std::string>& nodes);

}  // namespace rlforge
