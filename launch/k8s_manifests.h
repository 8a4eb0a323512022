// Kubernetes manifests for one job: `rlforge k8s job.yaml` (docs/multi_host.md#kubernetes).
//
// K8sJob (the resolved job, its roles, ports and keys) -> K8sManifests() -> one YAML stream:
//   ConfigMap  <name>-job          the resolved job file the controller runs
//   Secret     <name>-keys         controller.key, actor.key (CURVE), the dashboard token
//   Job        <name>-controller   `rlforge run` (launch.backend kubernetes: launches nothing)
//   Service    <name>-controller   control plane, trainer store and dashboard ports
//   Service    <name>-trainer      headless: stable hostnames <name>-trainer-<rank>.<name>-trainer
//   Job        <name>-trainer      indexed: completion index = trainer rank
//   Deployment <name>-<role>       one per worker role (rollout, reward, ...): scalable, each
//                                  pod joins by address and takes any free slot of its role
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace rlforge {

struct K8sRole {
  std::string role;  // "trainer", "rollout", "reward", ...
  int count = 0;     // trainer ranks or workers
  int gpus = 0;      // per actor: nvidia.com/gpu
};

struct K8sJob {
  std::string name;      // the job's name; made a DNS-1123 label here
  std::string job_yaml;  // the resolved job file the controller runs (ConfigMap)
  int64_t controller_port = 0;
  int64_t store_port = 0;      // 0: no trainer store (one trainer rank, no gloo weight plane)
  int64_t dashboard_port = 0;  // 0: no dashboard
  std::vector<K8sRole> roles;
  // Secret contents: the key files (proto/curve_keys.h) and the dashboard token.
  std::string controller_key;
  std::string actor_key;
  std::string dashboard_token;
};

struct K8sOptions {
  std::string image;  // container image with rlforge installed (required)
  std::string namespace_ = "default";
  std::string run_claim;            // PersistentVolumeClaim for runs/; "": an emptyDir
  std::string rlforge = "rlforge";  // the command inside the image
};

// Where the pods mount things (also written into the job file the ConfigMap holds).
inline constexpr char kK8sJobDir[] = "/etc/rlforge/job";
inline constexpr char kK8sKeyDir[] = "/etc/rlforge/keys";
inline constexpr char kK8sRunRoot[] = "/var/lib/rlforge/runs";

// `name` as a DNS-1123 label (lower case, [a-z0-9-], at most `max_len` characters, starting
// and ending alphanumeric); an error when nothing usable is left.
absl::StatusOr<std::string> K8sName(const std::string& name, size_t max_len = 40);

// The manifests, as one YAML stream of documents separated by `---`.
absl::StatusOr<std::string> K8sManifests(const K8sJob& job, const K8sOptions& options);

}  // namespace rlforge
