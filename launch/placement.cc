#include "launch/placement.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rlforge {

namespace {

std::string NodeList(const std::vector<int64_t>& nodes) {
  return absl::StrCat("[", absl::StrJoin(nodes, ", "), "]");
}

}  // namespace

absl::StatusOr<std::vector<int>> PlaceRole(const RoleSlots& role, int num_nodes) {
  std::vector<int64_t> allowed = role.nodes;
  if (allowed.empty()) {
    for (int n = 0; n < num_nodes; ++n) allowed.push_back(n);
  }
  if (allowed.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(role.key, ": there are no nodes to place ",
                                                   role.count, " ", role.role, " actor(s) on"));
  }
  for (int64_t n : allowed) {
    if (n < 0 || n >= num_nodes) {
      return absl::InvalidArgumentError(
          absl::StrCat(role.key, ".nodes: node ", n, " is outside the allocation, which has ",
                       num_nodes, " node(s) (indices 0..", num_nodes - 1, ")"));
    }
  }
  if (role.per_node > 0 && role.count > role.per_node * static_cast<int64_t>(allowed.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(role.key, ": ", role.count, " ", role.packed ? "ranks" : "workers",
                     " do not fit on nodes ", NodeList(allowed), " at per_node ", role.per_node));
  }
  std::vector<int> out;
  out.reserve(role.count);
  if (role.packed) {
    const int64_t cap = role.per_node > 0 ? role.per_node : role.count;
    for (int r = 0; r < role.count; ++r) out.push_back(static_cast<int>(allowed[r / cap]));
    return out;
  }
  // Round-robin: no node holds more than ceil(count / nodes), within the cap checked above.
  for (int r = 0; r < role.count; ++r) out.push_back(static_cast<int>(allowed[r % allowed.size()]));
  return out;
}

int NodesNeeded(const std::vector<RoleSlots>& roles) {
  int64_t needed = 1;
  for (const RoleSlots& r : roles) {
    if (r.count == 0) continue;
    if (!r.nodes.empty()) {
      needed = std::max(needed, *std::max_element(r.nodes.begin(), r.nodes.end()) + 1);
    } else if (r.per_node > 0) {
      needed = std::max(needed, (r.count + r.per_node - 1) / r.per_node);
    }
  }
  return static_cast<int>(needed);
}

absl::StatusOr<int64_t> GpusPerNodeNeeded(const std::vector<RoleSlots>& roles, int num_nodes) {
  std::vector<int64_t> per_node(num_nodes, 0);
  for (const RoleSlots& r : roles) {
    if (r.gpus == 0) continue;
    auto placed = PlaceRole(r, num_nodes);
    if (!placed.ok()) return placed.status();
    for (int n : *placed) per_node[n] += r.gpus;
  }
  return per_node.empty() ? 0 : *std::max_element(per_node.begin(), per_node.end());
}

}  // namespace rlforge
