#include "launch/slurm_launcher.h"

#include <unistd.h>

#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "launch/command.h"

extern char** environ;

namespace rlforge {

namespace {

bool PassedToSteps(const std::string& name) {
  for (const char* exact :
       {"PATH", "HOME", "LANG", "LC_ALL", "LD_LIBRARY_PATH", "TMPDIR", "RLFORGE_KEYS"}) {
    if (name == exact) return true;
  }
  for (const char* prefix : {"NCCL_", "GLOO_", "UCX_", "FI_"}) {
    if (absl::StartsWith(name, prefix)) return true;
  }
  return false;
}

// `program` as the shell would find it in PATH; "" when it is not there.
std::string FindInPath(const std::string& program) {
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path ? path : "/usr/bin:/bin", ':')) {
    std::string candidate = absl::StrCat(dir.empty() ? "." : dir, "/", program);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

}  // namespace

std::map<std::string, std::string> StepEnvironment(char** environ_vars) {
  std::map<std::string, std::string> out;
  for (char** e = environ_vars; e != nullptr && *e != nullptr; ++e) {
    std::string kv = *e;
    size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    std::string name = kv.substr(0, eq);
    if (PassedToSteps(name)) out[name] = kv.substr(eq + 1);
  }
  return out;
}

std::vector<std::string> SrunArgv(const ProcessSpec& spec,
                                  const std::vector<std::string>& export_names,
                                  const std::string& srun) {
  std::vector<std::string> argv = {srun,
                                   "--overlap",
                                   "--nodes=1",
                                   "--ntasks=1",
                                   "--nodelist=" + spec.host,
                                   "--job-name=" + spec.name,
                                   "--kill-on-bad-exit=1"};
  // Names only: the values come from srun's own environment, never from a command line that
  // `ps` shows to everyone on the host (the launch token is one of them).
  argv.push_back(export_names.empty() ? "--export=NONE"
                                      : "--export=" + absl::StrJoin(export_names, ","));
  if (spec.gpus > 0) argv.push_back(absl::StrCat("--gpus-per-task=", spec.gpus));
  argv.push_back("--");
  argv.insert(argv.end(), spec.argv.begin(), spec.argv.end());
  return argv;
}

absl::StatusOr<std::vector<std::string>> AllocationNodes(double timeout_s) {
  const char* list = std::getenv("SLURM_JOB_NODELIST");
  if (list == nullptr || *list == '\0') {
    return absl::FailedPreconditionError(
        "launch.backend slurm: this is not inside a Slurm allocation (SLURM_JOB_NODELIST is "
        "not set); run inside `salloc` or `sbatch`, or submit with `rlforge slurm JOB.yaml`");
  }
  auto r = RunCommand({"scontrol", "show", "hostnames", list}, timeout_s);
  if (!r.ok()) return r.status();
  if (r->exit_code != 0) {
    return absl::UnavailableError(absl::StrCat("`scontrol show hostnames ", list,
                                               "` exited with code ", r->exit_code, ": ", r->err));
  }
  std::vector<std::string> nodes = absl::StrSplit(r->out, '\n', absl::SkipWhitespace());
  if (nodes.empty()) {
    return absl::UnavailableError(
        absl::StrCat("`scontrol show hostnames ", list, "` printed no node names"));
  }
  return nodes;
}

SlurmProcessLauncher::SlurmProcessLauncher(ProcessLauncher* local)
    : local_(local), srun_(FindInPath("srun")), step_env_(StepEnvironment(environ)) {}

absl::StatusOr<int> SlurmProcessLauncher::Start(const ProcessSpec& spec) {
  if (spec.host.empty()) return local_->Start(spec);
  if (!spec.cpus.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot start ", spec.name, " on ", spec.host,
        ": cpu pinning is for processes on the controller's host; Slurm binds a step's cpus"));
  }
  if (srun_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot start ", spec.name, " on ", spec.host, ": srun is not in PATH (",
                     std::getenv("PATH") ? std::getenv("PATH") : "", ")"));
  }
  ProcessSpec srun;
  srun.name = spec.name;
  srun.log_path = spec.log_path;
  srun.env = step_env_;
  for (const auto& [k, v] : spec.env) srun.env[k] = v;
  std::vector<std::string> names;
  for (const auto& [k, v] : srun.env) names.push_back(k);
  srun.argv = SrunArgv(spec, names, srun_);
  return local_->Start(srun);
}

}  // namespace rlforge
