// `rlforge k8s job.yaml [key=value ...] --image IMAGE`: the job's Kubernetes manifests
// (launch/k8s_manifests.h; docs/multi_host.md#kubernetes).
//
// job file + overrides -> the job as the controller pod runs it (launch.backend kubernetes,
// bound on every interface at fixed ports, keys and run directory at the pods' mounts) ->
// validated again as loaded in the pod -> roles from the algorithm -> new CURVE keys and a
// dashboard token -> manifests on stdout or in --out (0600: they hold the keys)
#pragma once

#include <string>
#include <vector>

#include "launch/k8s_manifests.h"

namespace rlforge {

struct K8sCommandOptions {
  K8sOptions manifests;
  std::string out;  // "" or "-": stdout
};

// Exit codes: 0 written, 1 the output could not be written, 2 the job cannot run there (or
// bad usage).
int RunK8sCommand(const std::string& job_path, const std::vector<std::string>& overrides,
                  const K8sCommandOptions& options);

}  // namespace rlforge
