// The rlforge binary: one executable for every role.
//
//   rlforge run JOB.yaml [key=value ...]      run a job (controller + local actors)
//   rlforge run --resume RUN_DIR              continue a run from its newest checkpoint
//   rlforge controller JOB.yaml [key=value]   run the controller; every actor joins by hand
//   rlforge validate JOB.yaml [key=value ...] check a job file without running it
//   rlforge slurm JOB.yaml [key=value] [--dry-run]  submit the job to Slurm (sbatch)
//   rlforge k8s JOB.yaml [key=value] --image IMG    the job's Kubernetes manifests
//   rlforge actor --role R --connect ADDR     join a running job as one actor
//   rlforge generate --model DIR [...]        sample from a checkpoint (rlforge-lm)
//   rlforge eval --model DIR --data FILE [...] evaluate a checkpoint (rlforge-lm)
//   rlforge sim-server --env ID --num-envs N --bind ADDR   serve built-in envs over sim_bridge
//   rlforge config-docs [--write FILE]        print (or update) the config key reference
//   rlforge status RUN_DIR_OR_URL [--token T] print a run's state (files or live dashboard)
//
// Exit codes: 0 success, 1 the job failed, 2 bad usage or bad config (also when a worker's
// set-up fails on the job's config: never retried), 128+N stopped by signal N.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "CLI/CLI.hpp"
#include "cli/k8s_command.h"
#include "cli/load_job.h"
#include "cli/setup_checks.h"
#include "cli/signals.h"
#include "cli/slurm_command.h"
#include "common/logging.h"
#include "common/status.h"
#include "config/dashboard_config.h"
#include "config/job_config.h"
#include "controller/job_runner.h"
#include "dashboard/status_command.h"
#include "launch/process_launcher.h"
#include "sim_bridge/sim_server.h"

namespace {

std::atomic<int>& g_stop = rlforge::StopFlag();
using rlforge::InstallSignalHandlers;

using rlforge::LoadOrReport;

// model.init_job: a job that produces model.path (e.g. the SFT stage of an RL job), run
// first when model.path is not there yet. Returns 0 when model.path exists afterwards.
int RunInitJob(const std::string& path, const rlforge::JobConfig& main_job,
               const rlforge::RunOptions& ro) {
  const rlforge::ModelOptions& m = main_job.model;
  if (m.init_job.empty() || m.path.empty() || std::filesystem::is_directory(m.path)) return 0;
  std::fprintf(stderr, "rlforge: %s: model.path %s does not exist yet; running model.init_job %s\n",
               path.c_str(), m.path.c_str(), m.init_job.c_str());
  rlforge::LoadedJob first;
  if (!LoadOrReport(m.init_job, {}, &first, rlforge::SetupChecks())) {
    std::fprintf(stderr, "(%s: model.init_job names %s)\n", path.c_str(), m.init_job.c_str());
    return 2;
  }
  rlforge::RunOptions first_ro = ro;
  first_ro.resume_dir.clear();  // the first stage is a run of its own
  if (int rc = rlforge::RunJob(first.config, first_ro); rc != 0) return rc;
  if (!std::filesystem::is_directory(m.path)) {
    std::fprintf(stderr,
                 "error: %s: model.init_job %s finished, but model.path %s still does not exist "
                 "(its checkpoints went to %s/%s*/checkpoints/)\n",
                 path.c_str(), m.init_job.c_str(), m.path.c_str(),
                 first.config.job.run_root.c_str(), first.config.job.name.c_str());
    return 2;
  }
  return 0;
}

// `all_external` (`rlforge controller`): launch.backend kubernetes, whatever the file says, so
// that every actor joins by hand.
int CmdRun(const std::string& path, std::vector<std::string> overrides, bool all_external,
           const std::string& resume_dir = "") {
  if (all_external) overrides.push_back("launch.backend=kubernetes");
  rlforge::LoadedJob job;
  if (!LoadOrReport(path, overrides, &job, rlforge::SetupChecks())) return 2;
  rlforge::RunOptions ro;
  ro.self_exe = rlforge::SelfExecutable();
  ro.stop = &g_stop;
  ro.signals = &rlforge::SignalCount();
  ro.interactive = isatty(STDOUT_FILENO);
  ro.resume_dir = resume_dir;
  InstallSignalHandlers();
  if (int rc = RunInitJob(path, job.config, ro); rc != 0) return rc;
  return rlforge::RunJob(job.config, ro);
}

// `rlforge run --resume RUN_DIR`: the run's own resolved config, nothing overridden (a
// changed config would not continue the same run).
int CmdResume(const std::string& run_dir, const std::string& job_path,
              const std::vector<std::string>& overrides) {
  if (!job_path.empty() || !overrides.empty()) {
    std::fprintf(stderr,
                 "error: rlforge run --resume %s takes no job file or overrides: it continues "
                 "with the run's own %s/config.resolved.yaml\n",
                 run_dir.c_str(), run_dir.c_str());
    return 2;
  }
  const std::string config = run_dir + "/config.resolved.yaml";
  if (!std::filesystem::is_regular_file(config)) {
    std::fprintf(stderr, "error: --resume %s: not a run directory (no config.resolved.yaml)\n",
                 run_dir.c_str());
    return 2;
  }
  return CmdRun(config, {}, false, run_dir);
}

int CmdValidate(const std::string& path, const std::vector<std::string>& overrides) {
  rlforge::LoadedJob job;
  if (!LoadOrReport(path, overrides, &job, rlforge::SetupChecks())) return 2;
  auto token =
      rlforge::ResolveDashboardToken(job.config.dashboard, std::getenv("RLFORGE_DASHBOARD_TOKEN"));
  if (!token.ok()) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(), rlforge::Msg(token.status()).c_str());
    return 2;
  }
  // The first stage that `run` would start with (RunInitJob), checked the same way.
  const rlforge::ModelOptions& m = job.config.model;
  if (!m.init_job.empty() && !m.path.empty() && !std::filesystem::is_directory(m.path)) {
    rlforge::LoadedJob first;
    if (!LoadOrReport(m.init_job, {}, &first, rlforge::SetupChecks())) {
      std::fprintf(stderr, "(%s: model.init_job names %s)\n", path.c_str(), m.init_job.c_str());
      return 2;
    }
  }
  std::printf("%s: ok (algorithm %s, run directory %s/%s)\n", path.c_str(),
              job.config.job.algorithm->name.c_str(), job.config.job.run_root.c_str(),
              job.config.job.name.c_str());
  return 0;
}

int CmdConfigDocs(const std::string& write_path) {
  std::string ref = rlforge::ConfigReferenceMarkdown();
  if (write_path.empty()) {
    std::printf("%s", ref.c_str());
    return 0;
  }
  std::ifstream in(write_path);
  if (!in) {
    std::fprintf(stderr, "error: cannot read %s\n", write_path.c_str());
    return 2;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  std::string doc = ss.str();
  const std::string begin = "<!-- BEGIN GENERATED REFERENCE -->\n";
  const std::string end = "<!-- END GENERATED REFERENCE -->";
  size_t a = doc.find(begin), b = doc.find(end);
  if (a == std::string::npos || b == std::string::npos || b < a) {
    std::fprintf(stderr, "error: %s has no generated-reference markers\n", write_path.c_str());
    return 2;
  }
  doc = doc.substr(0, a + begin.size()) + ref + doc.substr(b);
  std::ofstream out(write_path, std::ios::trunc);
  out << doc;
  std::printf("updated %s\n", write_path.c_str());
  return out ? 0 : 1;
}

int CmdStatus(const std::string& target, std::string token) {
  if (token.empty()) {
    const char* env = std::getenv("RLFORGE_DASHBOARD_TOKEN");
    if (env != nullptr) token = env;
  }
  auto text = rlforge::dashboard::StatusText(target, token);
  if (!text.ok()) {
    std::fprintf(stderr, "error: %s\n", rlforge::Msg(text.status()).c_str());
    return 1;
  }
  std::printf("%s", text->c_str());
  return 0;
}

int CmdSimServer(const std::string& env_id, int num_envs, int max_steps, const std::string& bind,
                 int spin_us) {
  rlforge::InitLogging("sim-server", "info");
  auto envs = rlforge::sim::LocalVectorEnv::Create(env_id, num_envs, max_steps);
  if (!envs.ok()) {
    std::fprintf(stderr, "error: --env: %s\n", rlforge::Msg(envs.status()).c_str());
    return 2;
  }
  zmq::context_t ctx;
  rlforge::sim::ShmChannel::Options shm;
  shm.spin_us = spin_us;
  auto server = rlforge::sim::SimServer::Bind(ctx, std::move(*envs), bind, shm);
  if (!server.ok()) {
    std::fprintf(stderr, "error: --bind: %s\n", rlforge::Msg(server.status()).c_str());
    return 2;
  }
  InstallSignalHandlers();
  spdlog::info("serving {} x {} on {}", env_id, num_envs, (*server)->endpoint());
  (*server)->Serve(&g_stop);
  spdlog::info("stopping after {} requests", (*server)->requests_served());
  return 0;
}

// Runs `exe` with argv[first..]: the commands that need libtorch live in binaries next to
// this one (which does not load it): `rlforge actor ARGS` is rlforge-actor ARGS, `rlforge
// generate|eval ARGS` is rlforge-lm generate|eval ARGS.
int ExecSibling(const std::string& exe, int first, int argc, char** argv) {
  std::vector<char*> args = {const_cast<char*>(exe.c_str())};
  for (int i = first; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  execv(exe.c_str(), args.data());
  std::fprintf(stderr, "error: cannot run %s: %s (it is built with rlforge, next to it)\n",
               exe.c_str(), std::strerror(errno));
  return 2;
}

// Every command's arguments, as CLI11 fills them.
struct CliArgs {
  std::string job_path, resume_dir;
  std::vector<std::string> overrides;
  bool slurm_dry_run = false;
  rlforge::K8sCommandOptions k8s;
  std::string sim_env, sim_bind;
  int sim_num_envs = 1, sim_max_steps = 0,
      sim_spin_us = rlforge::sim::ShmChannel::Options{}.spin_us;
  std::string write_path, status_target, status_token;
};

struct Commands {
  CLI::App *run, *ctl, *validate, *slurm, *k8s, *simsrv, *docs, *stat;
};

// The commands that take a job file: run, controller, validate, slurm, k8s.
void AddJobCommands(CLI::App& app, CliArgs& a, Commands& c) {
  c.run = app.add_subcommand("run", "Run a job: the controller and its local actors");
  c.run->add_option("job", a.job_path, "Job file (YAML)");
  c.run->add_option("overrides", a.overrides, "Dotted overrides, e.g. trainer.lr=3e-4");
  c.run->add_option("--resume", a.resume_dir,
                    "Continue the run in this directory from its newest complete checkpoint "
                    "(docs/checkpoints.md)");
  c.ctl = app.add_subcommand(
      "controller",
      "Run only the controller; every actor joins by hand (launch.backend=kubernetes)");
  c.ctl->add_option("job", a.job_path, "Job file (YAML)")->required();
  c.ctl->add_option("overrides", a.overrides, "Dotted overrides");
  c.validate = app.add_subcommand("validate", "Check a job file without running it");
  c.validate->add_option("job", a.job_path, "Job file (YAML)")->required();
  c.validate->add_option("overrides", a.overrides, "Dotted overrides");
  c.slurm = app.add_subcommand(
      "slurm", "Submit the job to Slurm: an sbatch script running it with launch.backend=slurm");
  c.slurm->add_option("job", a.job_path, "Job file (YAML)")->required();
  c.slurm->add_option("overrides", a.overrides, "Dotted overrides");
  c.slurm->add_flag("--dry-run", a.slurm_dry_run,
                    "Print the sbatch script instead of submitting it");
  c.k8s = app.add_subcommand(
      "k8s", "Write the job's Kubernetes manifests (docs/multi_host.md#kubernetes)");
  c.k8s->add_option("job", a.job_path, "Job file (YAML)")->required();
  c.k8s->add_option("overrides", a.overrides, "Dotted overrides");
  c.k8s->add_option("--image", a.k8s.manifests.image, "Container image with rlforge")->required();
  c.k8s->add_option("--namespace", a.k8s.manifests.namespace_, "Kubernetes namespace");
  c.k8s->add_option("--run-claim", a.k8s.manifests.run_claim,
                    "PersistentVolumeClaim for the run directory (default: an emptyDir, lost "
                    "with the controller's pod)");
  c.k8s->add_option("--out", a.k8s.out,
                    "Write the manifests here, 0600 (they hold the job's keys); default: stdout");
}

// The other commands: actor / generate / eval (listed for --help; main hands them to their
// binaries before parsing), sim-server, config-docs, status.
void AddToolCommands(CLI::App& app, CliArgs& a, Commands& c) {
  app.add_subcommand("actor", "Join a running job as one actor (--role R --connect ADDR ...)")
      ->allow_extras();
  app.add_subcommand("generate", "Sample from a checkpoint (docs/generate_eval.md; --help)")
      ->allow_extras();
  app.add_subcommand("eval", "Evaluate a checkpoint on a JSONL set (docs/generate_eval.md)")
      ->allow_extras();
  app.add_subcommand("import-gguf",
                     "Convert a llama GGUF file into a Hugging Face checkpoint directory "
                     "(FILE OUT_DIR; docs/bring_your_own_model.md)")
      ->allow_extras();
  app.add_subcommand("merge-lora",
                     "Merge a PEFT LoRA adapter into its base: an ordinary HF checkpoint "
                     "(ADAPTER_DIR OUT_DIR [--base DIR]; docs/lora.md)")
      ->allow_extras();
  c.simsrv = app.add_subcommand("sim-server", "Serve built-in envs over the sim_bridge protocol");
  c.simsrv->add_option("--env", a.sim_env, "Env id, e.g. CartPole-v1")->required();
  c.simsrv->add_option("--num-envs", a.sim_num_envs, "Envs in the batch")
      ->check(CLI::PositiveNumber);
  c.simsrv->add_option("--max-episode-steps", a.sim_max_steps, "Time limit; 0 keeps the env's own");
  c.simsrv
      ->add_option("--bind", a.sim_bind,
                   "Address, e.g. tcp://127.0.0.1:5555, ipc:///tmp/s.sock or shm://name (one "
                   "client, same host)")
      ->required();
  c.simsrv
      ->add_option("--spin-us", a.sim_spin_us,
                   "shm: busy-wait this long for the next request before sleeping (longer "
                   "answers sooner, but holds a core; the controller passes 2000 when this "
                   "server has a core apart from its worker's)")
      ->check(CLI::Range(0, 1000000));
  c.docs = app.add_subcommand("config-docs", "Print the reference of every job-file key");
  c.docs->add_option("--write", a.write_path, "Update the generated part of this markdown file");
  c.stat = app.add_subcommand("status", "Print a run's state: a run directory or dashboard URL");
  c.stat
      ->add_option("target", a.status_target, "Run directory, or http://HOST:PORT of its dashboard")
      ->required();
  c.stat->add_option("--token", a.status_token,
                     "Dashboard token (default: the environment's RLFORGE_DASHBOARD_TOKEN)");
}

// The parsed command, run.
int Dispatch(const CliArgs& a, const Commands& c) {
  if (*c.run && !a.resume_dir.empty()) return CmdResume(a.resume_dir, a.job_path, a.overrides);
  if (*c.run && a.job_path.empty()) {
    std::fprintf(stderr, "error: rlforge run needs a job file (or --resume RUN_DIR)\n");
    return 2;
  }
  if (*c.run) return CmdRun(a.job_path, a.overrides, false);
  if (*c.ctl) return CmdRun(a.job_path, a.overrides, true);
  if (*c.validate) return CmdValidate(a.job_path, a.overrides);
  if (*c.slurm) return rlforge::RunSlurmCommand(a.job_path, a.overrides, a.slurm_dry_run);
  if (*c.k8s) return rlforge::RunK8sCommand(a.job_path, a.overrides, a.k8s);
  if (*c.docs) return CmdConfigDocs(a.write_path);
  if (*c.stat) return CmdStatus(a.status_target, a.status_token);
  if (*c.simsrv) {
    return CmdSimServer(a.sim_env, a.sim_num_envs, a.sim_max_steps, a.sim_bind, a.sim_spin_us);
  }
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string command = argc >= 2 ? argv[1] : "";
  const std::string self = rlforge::SelfExecutable();
  if (command == "actor") return ExecSibling(rlforge::ActorExecutable(self), 2, argc, argv);
  if (command == "generate" || command == "eval" || command == "import-gguf" ||
      command == "merge-lora") {
    return ExecSibling(rlforge::LmToolExecutable(self), 1, argc, argv);
  }
  CLI::App app{"rlforge: reinforcement-learning post-training from one YAML file"};
  app.require_subcommand(1);
  CliArgs args;
  Commands commands;
  AddJobCommands(app, args, commands);
  AddToolCommands(app, args, commands);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  return Dispatch(args, commands);
}
