#include "launch/slurm_batch.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "launch/command.h"

namespace rlforge {

namespace {

std::string ShellQuote(const std::string& s) {
  return absl::StrCat("'", absl::StrReplaceAll(s, {{"'", "'\\''"}}), "'");
}

}  // namespace

std::string SbatchScript(const BatchJob& job) {
  std::string s = "#!/bin/bash\n";
  absl::StrAppend(&s, "#SBATCH --job-name=", job.name, "\n");
  absl::StrAppend(&s, "#SBATCH --nodes=", job.nodes, "\n");
  absl::StrAppend(&s, "#SBATCH --ntasks-per-node=1\n");
  absl::StrAppend(&s, "#SBATCH --exclusive\n");
  if (job.gpus_per_node > 0) absl::StrAppend(&s, "#SBATCH --gres=gpu:", job.gpus_per_node, "\n");
  absl::StrAppend(&s, "#SBATCH --chdir=", job.workdir, "\n");
  absl::StrAppend(&s, "#SBATCH --output=", job.run_root, "/", job.name, "-%j.out\n");
  absl::StrAppend(&s,
                  "# Written by `rlforge slurm`. The controller runs here, on the first node; "
                  "each actor\n# is an `srun --overlap` step on the node its placement names "
                  "(launch.placement).\n"
                  "# scancel stops the job: the controller gets SIGTERM and stops every "
                  "step.\n");
  s += "exec";
  for (const std::string& a : job.run) absl::StrAppend(&s, " ", ShellQuote(a));
  absl::StrAppend(&s, " ", ShellQuote(absl::StrCat("job.name=", job.name, "-")),
                  "\"$SLURM_JOB_ID\"\n");
  return s;
}

std::string BatchRunDirectory(const BatchJob& job, const std::string& slurm_job_id) {
  return absl::StrCat(job.run_root, "/", job.name, "-", slurm_job_id);
}

absl::StatusOr<std::string> SubmitBatch(const std::string& script_path, double timeout_s) {
  auto r = RunCommand({"sbatch", "--parsable", script_path}, timeout_s);
  if (!r.ok()) return r.status();
  if (r->exit_code != 0) {
    return absl::UnavailableError(absl::StrCat("sbatch ", script_path, " exited with code ",
                                               r->exit_code, ": ",
                                               absl::StripSuffix(r->err, "\n")));
  }
  // --parsable prints "ID" or "ID;CLUSTER".
  std::string id(absl::StripAsciiWhitespace(r->out));
  id = id.substr(0, id.find(';'));
  if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos) {
    return absl::UnavailableError(
        absl::StrCat("sbatch ", script_path, " printed no job id: '", r->out, "'"));
  }
  return id;
}

}  // namespace rlforge
