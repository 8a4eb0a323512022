#include "controller/actor_registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace rlforge {

const char* ActorStateName(ActorState s) {
  switch (s) {
    case ActorState::kPending:
      return "pending";
    case ActorState::kReady:
      return "ready";
    case ActorState::kBusy:
      return "busy";
    case ActorState::kDead:
      return "dead";
    case ActorState::kStopped:
      return "stopped";
    case ActorState::kVacant:
      return "vacant";
    case ActorState::kLeft:
      return "left";
  }
  return "?";
}

namespace {

// Slot `rank` of `role`: its id, and how it is started and replaced.
ActorInfo Slot(const std::string& role, int rank, bool external, bool recoverable) {
  ActorInfo a;
  a.id = absl::StrCat(role, "-", rank);
  a.role = role;
  a.rank = rank;
  a.external = external;
  a.recoverable = recoverable;
  return a;
}

}  // namespace

void ActorRegistry::ExpectRole(const std::string& role, int count, bool external,
                               bool recoverable) {
  for (int r = 0; r < count; ++r) {
    ActorInfo a = Slot(role, r, external, recoverable);
    order_.push_back(a.id);
    actors_[a.id] = a;
  }
}

void ActorRegistry::AllowJoins(const std::string& role, int max_count) {
  elastic_roles_.insert(role);
  const std::vector<std::string> ids = IdsOfRole(role);
  // After the role's last slot, so display order stays role by role.
  auto at = order_.begin();
  if (!ids.empty()) at = std::find(order_.begin(), order_.end(), ids.back()) + 1;
  for (int r = static_cast<int>(ids.size()); r < max_count; ++r) {
    ActorInfo a = Slot(role, r, /*external=*/true, /*recoverable=*/true);
    a.elastic = true;
    a.state = ActorState::kVacant;
    at = order_.insert(at, a.id) + 1;
    actors_[a.id] = a;
  }
}

ActorInfo* ActorRegistry::Find(const std::string& id) {
  auto it = actors_.find(id);
  return it == actors_.end() ? nullptr : &it->second;
}

const ActorInfo* ActorRegistry::Find(const std::string& id) const {
  auto it = actors_.find(id);
  return it == actors_.end() ? nullptr : &it->second;
}

ActorInfo* ActorRegistry::FindByInstance(const std::string& instance_id) {
  for (auto& [id, a] : actors_) {
    if (!a.instance_id.empty() && a.instance_id == instance_id) return &a;
  }
  return nullptr;
}

ActorInfo* ActorRegistry::FindByLaunchedPid(int pid) {
  for (auto& [id, a] : actors_) {
    if (a.launched_pid == pid) return &a;
  }
  return nullptr;
}

std::optional<std::string> ActorRegistry::ChooseSlot(const std::string& role, int requested_rank,
                                                     const std::string& launch_token,
                                                     std::string* why) const {
  int count = CountOfRole(role);
  if (count == 0) {
    *why = absl::StrCat("role '", role, "' is not part of this job");
    return std::nullopt;
  }
  const bool elastic = Elastic(role);
  auto open = [](const ActorInfo& a) {
    return a.state == ActorState::kVacant || a.state == ActorState::kLeft;
  };
  if (requested_rank >= 0) {
    if (requested_rank >= count) {
      *why =
          absl::StrCat("rank ", requested_rank, " is out of range: the job has ", count, " ", role,
                       " slot(s)", elastic ? absl::StrCat(" (", role, ".max_workers)") : "");
      return std::nullopt;
    }
    std::string id = absl::StrCat(role, "-", requested_rank);
    const ActorInfo& a = actors_.at(id);
    if (open(a)) return id;
    if (a.state != ActorState::kPending) {
      *why = absl::StrCat(id, " is already registered");
      return std::nullopt;
    }
    if (!a.external && a.launch_token != launch_token) {
      *why = absl::StrCat(id, " is started by the controller itself (set ", role,
                          ".external: true to join it by hand)");
      return std::nullopt;
    }
    return id;
  }
  const std::vector<std::string> ids = IdsOfRole(role);
  for (const std::string& id : ids) {
    const ActorInfo& a = actors_.at(id);
    // Unranked joiners take external slots only; launched slots wait for their own process.
    if (a.state == ActorState::kPending && a.external) return id;
  }
  for (const std::string& id : ids) {
    if (open(actors_.at(id))) return id;
  }
  *why = elastic
             ? absl::StrCat("every ", role, " slot is taken (", count, ", ", role, ".max_workers)")
             : absl::StrCat("every ", role, " slot open to external actors is taken");
  return std::nullopt;
}

std::vector<std::string> ActorRegistry::Roles() const {
  std::vector<std::string> roles;
  for (const auto& id : order_) {
    const std::string& r = actors_.at(id).role;
    if (roles.empty() || roles.back() != r) roles.push_back(r);
  }
  return roles;
}

std::vector<std::string> ActorRegistry::IdsOfRole(const std::string& role) const {
  std::vector<std::string> ids;
  for (const auto& id : order_) {
    if (actors_.at(id).role == role) ids.push_back(id);
  }
  return ids;
}

int ActorRegistry::CountOfRole(const std::string& role) const {
  return static_cast<int>(IdsOfRole(role).size());
}

int ActorRegistry::ConfiguredCount() const {
  int n = 0;
  for (const auto& [id, a] : actors_) n += a.elastic ? 0 : 1;
  return n;
}

bool ActorRegistry::OpenToJoin(const std::string& role) const {
  for (const std::string& id : IdsOfRole(role)) {
    const ActorState s = actors_.at(id).state;
    if (s == ActorState::kVacant || s == ActorState::kLeft) return true;
  }
  return false;
}

std::vector<std::string> ActorRegistry::LiveOfRole(const std::string& role) const {
  std::vector<std::string> live;
  for (const std::string& id : IdsOfRole(role)) {
    const ActorState s = actors_.at(id).state;
    if (s == ActorState::kReady || s == ActorState::kBusy) live.push_back(id);
  }
  return live;
}

std::vector<const ActorInfo*> ActorRegistry::All() const {
  std::vector<const ActorInfo*> out;
  for (const auto& id : order_) out.push_back(&actors_.at(id));
  return out;
}

std::vector<const ActorInfo*> ActorRegistry::Pending() const {
  std::vector<const ActorInfo*> out;
  for (const auto& id : order_) {
    if (actors_.at(id).state == ActorState::kPending) out.push_back(&actors_.at(id));
  }
  return out;
}

}  // namespace rlforge
