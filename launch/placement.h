// Which node of an allocation each actor runs on: a pure function of the roles' placement.
//
// roles (count, allowed nodes, per-node cap) + node count -> node index of every actor slot
//
// Trainer ranks are packed in rank order (each node filled to its cap before the next, so
// ranks that talk most share a node); other roles' workers are dealt round-robin over their
// allowed nodes. The cap counts one role's actors only. No I/O; safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace rlforge {

struct RoleSlots {
  std::string role;            // "trainer", "rollout", ...
  int count = 0;               // actors of the role (ranks 0..count-1)
  bool packed = false;         // trainer ranks: fill nodes in order; else round-robin
  std::vector<int64_t> nodes;  // node indices the role may use; empty: every node
  int64_t per_node = 0;        // most actors of the role on one node; 0: no limit
  int64_t gpus = 0;            // GPUs each actor of the role gets
  std::string key;             // the config key, for errors ("launch.placement.rollout")
};

// Node index (0-based, into the allocation's node list) of rank 0..count-1 of `role`.
// Errors name role.key, the nodes and the cap: "launch.placement.rollout: 5 workers do not
// fit on nodes [1] at per_node 2".
absl::StatusOr<std::vector<int>> PlaceRole(const RoleSlots& role, int num_nodes);

// The fewest nodes an allocation needs for every role to fit (at least 1).
int NodesNeeded(const std::vector<RoleSlots>& roles);

// The most GPUs the roles placed on `num_nodes` nodes use on one node (0: none).
absl::StatusOr<int64_t> GpusPerNodeNeeded(const std::vector<RoleSlots>& roles, int num_nodes);

}  // namespace rlforge
