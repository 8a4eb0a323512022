// The Slurm launch backend: each actor is its own job step inside the job's allocation.
//
// ProcessSpec (host = node) -> srun --overlap --nodelist=NODE --export=NAMES ... -- argv
//   -> a local srun process (its output is the actor's log) -> the step on NODE
//
// srun runs on the controller's host and relays the step's output and signals, so Reap,
// Signal and Running act on the srun processes: a step that ends ends its srun (a lost
// worker for the controller), and killing srun cancels its step. A spec without a host
// (a service of the controller's, such as the trainer ranks' store) starts locally.
// The step inherits nothing from the controller's environment but the variables named in
// StepEnvironment() and the spec's own env; CUDA_VISIBLE_DEVICES is Slurm's to set.
// Call from one thread.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "launch/process_launcher.h"

namespace rlforge {

// The variables of `environ` that every step gets: PATH, HOME, LANG, LC_ALL, LD_LIBRARY_PATH,
// TMPDIR, RLFORGE_KEYS (the job's CURVE keys file), and any NCCL_*, GLOO_*, UCX_*, FI_*
// (network tuning a user sets for the job).
std::map<std::string, std::string> StepEnvironment(char** environ_vars);

// The srun command line that runs `spec` on node spec.host, exporting to the step only the
// variables `export_names` names (srun's own environment holds their values).
std::vector<std::string> SrunArgv(const ProcessSpec& spec,
                                  const std::vector<std::string>& export_names,
                                  const std::string& srun = "srun");

// The node names of the allocation this process runs in (SLURM_JOB_NODELIST, expanded by
// `scontrol show hostnames`); an error names what is missing outside an allocation.
absl::StatusOr<std::vector<std::string>> AllocationNodes(double timeout_s);

class SlurmProcessLauncher final : public ProcessLauncher {
 public:
  // `local` starts the srun processes and host-less specs; not owned, outlives this.
  explicit SlurmProcessLauncher(ProcessLauncher* local);
  absl::StatusOr<int> Start(const ProcessSpec& spec) override;
  std::vector<ProcessExit> Reap() override { return local_->Reap(); }
  void Signal(int pid, int signal) override { local_->Signal(pid, signal); }
  std::vector<int> Running() const override { return local_->Running(); }

 private:
  ProcessLauncher* local_;
  std::string srun_;                             // srun's path, from PATH
  std::map<std::string, std::string> step_env_;  // StepEnvironment(environ), read once
};

}  // namespace rlforge
