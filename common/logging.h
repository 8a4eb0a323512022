// Process logging set-up (spdlog). Each process calls InitLogging once in main.
//
// Logs go to stderr; an actor's stderr is its run-directory log file
// (logs/<role>-<rank>.log), so one sink serves both the console and the file.
#pragma once

#include <string>

#include "spdlog/spdlog.h"

namespace rlforge {

// `name` appears in every line, e.g. "controller" or "rollout-1".
void InitLogging(const std::string& name, const std::string& level = "info");

}  // namespace rlforge
