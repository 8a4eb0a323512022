// Starting and stopping actor processes: the local launch backend.
//
// controller -> ProcessLauncher::Start(spec) -> fork/exec child (own process
// group, stdout+stderr to its log file, dies with the controller) -> Reap()
//
// ProcessLauncher is an interface so the controller's supervision logic is
// tested with FakeProcessLauncher, without forking. Call from one thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace rlforge {

struct ProcessSpec {
  std::string name;                        // actor id, for messages ("rollout-1")
  std::vector<std::string> argv;           // argv[0] is the executable path
  std::string log_path;                    // stdout and stderr go here (appended)
  std::map<std::string, std::string> env;  // added to the controller's environment
  std::vector<int> cpus;                   // pinned to these before exec; empty: inherited
  std::string host{};                      // node to run on (Slurm's name); "": this host
  int64_t gpus = 0;                        // GPUs the process gets (Slurm binds them)
};

// The exit code of an rlforge process that cannot work with its config: bad usage, a bad value,
// a file that is missing or does not load (every rlforge binary returns it so). A relaunch would
// fail the same way, so the controller stops the job instead of retrying it
// (docs/fault_tolerance.md).
inline constexpr int kConfigErrorExit = 2;

struct ProcessExit {
  int pid = 0;
  std::string name;
  bool signaled = false;
  int code = 0;  // exit code, or the signal number when signaled
  // "exited with code 1", "killed by signal 9 (Killed)"
  std::string Describe() const;
  // It exited with kConfigErrorExit: a config error, not a fault.
  bool ConfigError() const { return !signaled && code == kConfigErrorExit; }
};

class ProcessLauncher {
 public:
  virtual ~ProcessLauncher() = default;
  // Starts the process; returns its pid. An exec failure is an error here.
  virtual absl::StatusOr<int> Start(const ProcessSpec& spec) = 0;
  // Children that ended since the last call; never blocks.
  virtual std::vector<ProcessExit> Reap() = 0;
  // Sends `signal` to the child's whole process group.
  virtual void Signal(int pid, int signal) = 0;
  // Pids started and not yet reaped.
  virtual std::vector<int> Running() const = 0;
};

class LocalProcessLauncher final : public ProcessLauncher {
 public:
  LocalProcessLauncher() = default;
  // Kills (SIGKILL) and reaps whatever is still running: no orphans.
  ~LocalProcessLauncher() override;
  absl::StatusOr<int> Start(const ProcessSpec& spec) override;
  std::vector<ProcessExit> Reap() override;
  void Signal(int pid, int signal) override;
  std::vector<int> Running() const override;

 private:
  std::map<int, std::string> running_;  // pid -> name
};

// Path of the running executable (/proc/self/exe).
std::string SelfExecutable();
// rlforge-actor, the binary with the actor roles, beside the rlforge binary `rlforge_exe`.
std::string ActorExecutable(const std::string& rlforge_exe);
// rlforge-store, the trainer ranks' rendezvous store, beside `rlforge_exe`.
std::string StoreExecutable(const std::string& rlforge_exe);
// rlforge-lm (`rlforge generate` and `rlforge eval`), next to the rlforge binary.
std::string LmToolExecutable(const std::string& rlforge_exe);

// The last `lines` lines of a text file ("" if unreadable), for error messages.
std::string TailOfFile(const std::string& path, int lines);

}  // namespace rlforge
