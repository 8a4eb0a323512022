#include "cli/slurm_command.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "cli/load_job.h"
#include "common/status.h"
#include "config/job_config.h"
#include "controller/actor_placement.h"
#include "controller/algorithm.h"
#include "launch/placement.h"
#include "launch/process_launcher.h"
#include "launch/slurm_batch.h"

namespace rlforge {

namespace {

namespace fs = std::filesystem;

// The batch job for `config`, whose `rlforge run` gets `overrides` and launch.backend=slurm.
absl::StatusOr<BatchJob> MakeBatchJob(const JobConfig& config, const std::string& job_path,
                                      const std::vector<std::string>& overrides) {
  ASSIGN_OR_RETURN(auto algorithm, CreateAlgorithm(config));
  ASSIGN_OR_RETURN(const std::vector<RoleSlots> slots, PlacementSlots(config, algorithm->Roles()));
  const int needed = NodesNeeded(slots);
  if (config.launch.nodes > 0 && config.launch.nodes < needed) {
    return absl::InvalidArgumentError(absl::StrCat("launch.nodes: ", config.launch.nodes,
                                                   " is fewer than the ", needed,
                                                   " nodes launch.placement needs"));
  }
  BatchJob job;
  job.name = config.job.name;
  job.nodes = config.launch.nodes > 0 ? static_cast<int>(config.launch.nodes) : needed;
  for (const RoleSlots& s : slots) {  // what cannot fit fails here, not in the queue
    RETURN_IF_ERROR(PlaceRole(s, job.nodes).status());
  }
  ASSIGN_OR_RETURN(job.gpus_per_node, GpusPerNodeNeeded(slots, job.nodes));
  job.workdir = fs::current_path().string();
  job.run_root = fs::absolute(config.job.run_root).lexically_normal().string();
  job.run = {SelfExecutable(), "run", fs::absolute(job_path).lexically_normal().string()};
  job.run.insert(job.run.end(), overrides.begin(), overrides.end());
  job.run.push_back("launch.backend=slurm");
  return job;
}

}  // namespace

int RunSlurmCommand(const std::string& job_path, const std::vector<std::string>& overrides,
                    bool dry_run) {
  std::vector<std::string> all = overrides;
  all.push_back("launch.backend=slurm");
  LoadedJob loaded;
  if (!LoadOrReport(job_path, all, &loaded)) return 2;
  auto job = MakeBatchJob(loaded.config, job_path, overrides);
  if (!job.ok()) {
    std::fprintf(stderr, "error: %s: %s\n", job_path.c_str(), Msg(job.status()).c_str());
    return 2;
  }
  const std::string script = SbatchScript(*job);
  if (dry_run) {
    std::printf("%s", script.c_str());
    return 0;
  }
  std::error_code ec;
  fs::create_directories(job->run_root, ec);
  const std::string script_path = job->run_root + "/" + job->name + ".sbatch";
  std::ofstream out(script_path, std::ios::trunc);
  out << script;
  out.close();
  if (ec || !out) {
    std::fprintf(stderr, "error: cannot write %s\n", script_path.c_str());
    return 1;
  }
  auto id = SubmitBatch(script_path, 60);
  if (!id.ok()) {
    std::fprintf(stderr, "error: %s\n", Msg(id.status()).c_str());
    return 1;
  }
  const std::string run_dir = BatchRunDirectory(*job, *id);
  std::printf("submitted Slurm job %s (%d node(s)); script %s\n", id->c_str(), job->nodes,
              script_path.c_str());
  std::printf("run directory: %s\noutput: %s.out\n", run_dir.c_str(), run_dir.c_str());
  return 0;
}

}  // namespace rlforge
