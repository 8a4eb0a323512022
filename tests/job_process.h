// Test helper: runs the rlforge binary as a child process, like a user would.
//
// Output (stdout and stderr together) goes to a file the test can read while
// the process runs. Uses the local launcher, so the child dies with the test.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "launch/process_launcher.h"
#include "nlohmann/json.hpp"

namespace rlforge::testing {

// Absolute path of the rlforge binary and of the source tree (set by ctest).
std::string RlforgeBin();
std::string SourceDir();
// A fresh empty folder for this test.
std::string FreshDir(const std::string& name);
std::string ReadFile(const std::string& path);

class JobProcess {
 public:
  // Starts `rlforge args...` in `cwd`, with `env` added to this process's environment.
  JobProcess(const std::vector<std::string>& args, const std::string& output_path,
             const std::map<std::string, std::string>& env = {});
  ~JobProcess();
  int pid() const { return pid_; }
  std::string Output() const { return ReadFile(output_path_); }
  // Waits until the output contains `text`; false on timeout or exit.
  bool WaitForOutput(const std::string& text, double timeout_s);
  // Waits for exit; nullopt on timeout. The exit code is 128+N for signal N.
  std::optional<int> Wait(double timeout_s);
  void Signal(int sig);

 private:
  LocalProcessLauncher launcher_;
  std::string output_path_;
  int pid_ = 0;
  std::optional<int> code_;
};

// Runs to completion (at most timeout_s) and returns {exit code, output}.
std::pair<int, std::string> RunRlforge(const std::vector<std::string>& args, double timeout_s = 60);

// Pids the controller reported starting ("started echo-0 (pid 123)").
std::vector<int> ActorPids(const std::string& controller_output);
// The pid the controller reported first starting `actor` with; 0 when it did not.
int StartedPid(const std::string& controller_output, const std::string& actor);
bool ProcessExists(int pid);

// `config` with its `exact` reward replaced by a length penalty, written to `path`: a
// seconds-long SFT model never answers correctly, and all-zero rewards leave nothing to learn.
std::string WithLengthReward(const std::string& config, const std::string& path);

// The records of <run_dir>/metrics.jsonl, in order.
std::vector<nlohmann::json> ReadMetricsJsonl(const std::string& run_dir);
// Waits (at most timeout_s) until <run_dir>/metrics.jsonl has `n` records; whether it did.
bool WaitForMetrics(const std::string& run_dir, size_t n, double timeout_s);
// The records of <run_dir>/events.jsonl as "<event> <actor>", in order.
std::vector<std::string> ReadEvents(const std::string& run_dir);

}  // namespace rlforge::testing
