#include "cli/k8s_command.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/load_job.h"
#include "common/role_names.h"
#include "common/status.h"
#include "config/job_config.h"
#include "controller/algorithm.h"
#include "controller/job_runner.h"
#include "proto/curve_keys.h"

namespace rlforge {

namespace {

// A Service names its ports, so 0 ("any free port" on one host) becomes these.
constexpr int64_t kControllerPort = 29500;
constexpr int64_t kStorePort = 29501;
constexpr int64_t kDashboardPort = 8265;

// The job as the controller pod runs it.
JobConfig ForKubernetes(JobConfig c, const std::string& service) {
  c.launch.backend = LaunchBackend::kKubernetes;
  c.controller.host = "0.0.0.0";
  c.controller.advertise_host = service;  // trainer ranks and engines reach the store there
  if (c.controller.port == 0) c.controller.port = kControllerPort;
  if (c.controller.store_port == 0) c.controller.store_port = kStorePort;
  c.controller.security = Security::kCurve;
  c.controller.keys = kK8sKeyDir;
  c.job.run_root = kK8sRunRoot;
  if (c.dashboard.enabled) {
    c.dashboard.host = "0.0.0.0";
    if (c.dashboard.port == 0) c.dashboard.port = kDashboardPort;
    c.dashboard.token.clear();  // from the Secret, through RLFORGE_DASHBOARD_TOKEN
  }
  return c;
}

int64_t GpusOf(const LaunchOptions& launch, const std::string& role) {
  if (role == kTrainerRole) return launch.placement.trainer.gpus;
  if (role == kRolloutRole) return launch.placement.rollout.gpus;
  if (role == kRewardRole) return launch.placement.reward.gpus;
  return 0;
}

std::string RandomHex(int words) {
  std::random_device rd;
  std::string t;
  for (int i = 0; i < words; ++i) t += absl::StrFormat("%08x", rd());
  return t;
}

absl::StatusOr<K8sJob> BuildK8sJob(const JobConfig& loaded, const K8sOptions& o) {
  K8sJob j;
  j.name = loaded.job.name;
  ASSIGN_OR_RETURN(std::string name, K8sName(j.name));
  const std::string service = absl::StrCat(name, "-controller.", o.namespace_, ".svc");
  const JobConfig c = ForKubernetes(loaded, service);
  // What the pod loads, checked as it will be loaded there (the backend's own rules included).
  j.job_yaml = ResolvedYaml(c);
  LoadedJob again = LoadJobText(j.job_yaml, "the job for Kubernetes");
  if (!again.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("this job cannot run on Kubernetes:\n", config::FormatErrors(again.errors)));
  }
  int trainer_ranks = 0;
  for (const RoleRequirement& r : AlgorithmRoles(again.config)) {
    j.roles.push_back({r.role, r.count, static_cast<int>(GpusOf(c.launch, r.role))});
    if (r.role == kTrainerRole) trainer_ranks = r.count;
  }
  j.controller_port = c.controller.port;
  j.store_port = NeedsTrainerStore(again.config, trainer_ranks) ? c.controller.store_port : 0;
  j.dashboard_port = c.dashboard.enabled ? c.dashboard.port : 0;
  if (c.dashboard.enabled) j.dashboard_token = RandomHex(4);
  ASSIGN_OR_RETURN(JobKeyTexts keys, MakeJobKeyTexts());
  j.controller_key = keys.controller;
  j.actor_key = keys.actor;
  return j;
}

// Written 0600 from the start: the manifests hold the job's keys.
bool WritePrivate(const std::string& path, const std::string& text) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  bool ok = fchmod(fd, 0600) == 0;
  for (size_t done = 0; ok && done < text.size();) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    ok = n > 0;
    if (ok) done += static_cast<size_t>(n);
  }
  return close(fd) == 0 && ok;
}

}  // namespace

int RunK8sCommand(const std::string& job_path, const std::vector<std::string>& overrides,
                  const K8sCommandOptions& o) {
  std::vector<std::string> all = overrides;
  all.push_back("launch.backend=kubernetes");
  LoadedJob loaded;
  if (!LoadOrReport(job_path, all, &loaded)) return 2;
  absl::StatusOr<K8sJob> job = BuildK8sJob(loaded.config, o.manifests);
  absl::StatusOr<std::string> text =
      job.ok() ? K8sManifests(*job, o.manifests) : absl::StatusOr<std::string>(job.status());
  if (!text.ok()) {
    std::fprintf(stderr, "error: %s\n", Msg(text.status()).c_str());
    return 2;
  }
  if (o.out.empty() || o.out == "-") {
    std::fputs(text->c_str(), stdout);
    return 0;
  }
  if (!WritePrivate(o.out, *text)) {
    std::fprintf(stderr, "error: cannot write %s\n", o.out.c_str());
    return 1;
  }
  std::printf(
      "wrote %s (0600: it holds the job's CURVE keys); apply it with `kubectl apply -f %s` "
      "(docs/multi_host.md#kubernetes)\n",
      o.out.c_str(), o.out.c_str());
  return 0;
}

}  // namespace rlforge
