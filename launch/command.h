// Running a short external command (scontrol, sbatch) and reading what it prints.
//
// argv -> fork/exec (stdin /dev/null) -> stdout and stderr read until exit -> result
//
// Every call has a deadline: a command still running then is killed and is an error.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace rlforge {

struct CommandResult {
  int exit_code = 0;  // 128+N when killed by signal N
  std::string out;    // stdout
  std::string err;    // stderr
};

// Runs argv[0] (looked up in PATH) with `argv`; fails when it cannot start or runs past
// `timeout_s` (then it is killed). A non-zero exit is a result, not an error.
absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv, double timeout_s);

}  // namespace rlforge
