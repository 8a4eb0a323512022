// PluginReward: a reward implemented by a shared library with the C ABI of plugin_abi.h.
//
// params.path -> dlopen -> rlforge_reward_plugin_v1() -> version check -> create(args)
//   -> score() per sample
//
// The library stays loaded for the life of the process (never dlclose()d), so an abandoned
// call that outlives the reward cannot run unmapped code.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "reward/reward.h"

namespace rlforge::reward {

// The file a plugin reward's params.path names. A relative path is relative to the working
// directory, as every path in a job file is (the workers `rlforge run` starts share its
// directory); it is never searched for in the library path as dlopen() would a bare name.
// `rlforge validate` and `rlforge run` check the same file before anything starts
// (CheckRewardSpec).
std::string PluginFile(const std::string& path);

// `args` are "key=value" strings. Errors name the path and what went wrong: the library does
// not load, lacks the entry symbol, has another ABI version, or its create() refused the args.
absl::StatusOr<std::unique_ptr<Reward>> LoadPluginReward(const std::string& path,
                                                         const std::vector<std::string>& args);

}  // namespace rlforge::reward
