// Sandbox: runs an untrusted program (a sample's code against a test) so that nothing it does
// reaches past its own run: for the `code` reward (code_reward.h).
//
// RunInSandbox(argv, files, limits)
//   -> a private working folder holding `files` (under /run/rlforge-sandbox), owned by a uid
//      of its own
//   -> fork; the child unshares network, PID, mount, IPC and UTS namespaces and forks the
//      program's init: no network (a namespace with no interface up), /tmp, /var/tmp, /dev/shm
//      and /run/lock are empty tmpfs (the folder is bound at /tmp/work, the cwd), rlimits on
//      CPU seconds, address space, processes, file size and open files, then the uid and exec
//   -> the caller reads stdout/stderr (capped) until the program ends or the wall-time limit,
//      when it kills the namespace's init: the kernel then kills every process left in it.
//
// Needs root (namespaces, mounts, setuid): a setup failure is an error Status naming the step,
// never a result that looks like a failed program.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace rlforge::reward {

struct SandboxLimits {
  double wall_s = 5;                     // then SIGKILL to the whole namespace
  int cpu_s = 2;                         // RLIMIT_CPU (SIGXCPU, then SIGKILL one second later)
  int64_t memory_bytes = 256ll << 20;    // RLIMIT_AS
  int processes = 16;                    // RLIMIT_NPROC, for the run's own uid
  int64_t file_bytes = 1ll << 20;        // RLIMIT_FSIZE: the largest file it may write
  int64_t tmpfs_bytes = 8ll << 20;       // each private tmpfs, the working folder's included
  int64_t output_bytes = 64ll << 10;     // stdout and stderr each keep this much
};

struct SandboxRun {
  int exit_code = -1;      // the program's exit status; -1 when a signal ended it
  int signal = 0;          // the signal that ended it, 0 if it exited
  bool timed_out = false;  // killed at limits.wall_s
  std::string out, err;    // truncated at limits.output_bytes
  int64_t uid = -1;        // the uid it ran as (its own: no other run of this process uses it)
  bool Passed() const { return !timed_out && signal == 0 && exit_code == 0; }
  std::string Describe() const;  // "exit 1", "killed by SIGKILL", "wall time 5 s"
};

// `files`: (name, content) written into the working folder before the run; names are plain
// file names (no '/'). argv[0] is an absolute path.
absl::StatusOr<SandboxRun> RunInSandbox(const std::vector<std::string>& argv,
                                        const std::vector<std::pair<std::string, std::string>>& files,
                                        const SandboxLimits& limits);

}  // namespace rlforge::reward
