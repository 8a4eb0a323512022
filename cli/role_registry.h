// The roles an actor process can take, assembled here in the binary so that actors/ (the
// runtime) depends on no role folder.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "actors/role.h"

namespace rlforge {

// Builds the role named `role` ("trainer", "rollout", ...). Unknown names are an error
// that lists the known ones. `progress` hears how far a long build (a checkpoint load) is.
absl::StatusOr<std::unique_ptr<Role>> CreateRole(const std::string& role, const JobConfig& config,
                                                 const proto::Assignment& assignment,
                                                 const SetupProgress& progress = {});
std::vector<std::string> KnownRoles();

}  // namespace rlforge
