// The names of rlforge's actor roles: the one place they are spelled.
//
// A role's name is its key everywhere: `rlforge actor --role NAME`, the controller's actor
// registry, launch placement (launch.placement.NAME), log files (logs/NAME-K.log), Kubernetes
// manifests and the algorithm table's `roles`. tools/check_config_strings.py fails the tests if
// a role name is written as a literal elsewhere.
#pragma once

namespace rlforge {

inline constexpr char kTrainerRole[] = "trainer";  // the learner's ranks (one rendezvous group)
inline constexpr char kRolloutRole[] = "rollout";  // LLM engines, or workers stepping simulators
inline constexpr char kRewardRole[] = "reward";    // reward workers scoring samples
inline constexpr char kEchoRole[] = "echo";        // the transport self-test's actors

}  // namespace rlforge
