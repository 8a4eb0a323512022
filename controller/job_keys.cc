#include "controller/job_keys.h"

#include <filesystem>

#include "common/host_address.h"
#include "common/logging.h"
#include "common/status.h"

namespace rlforge {

bool UsesCurve(const ControllerOptions& controller) {
  if (controller.security == "curve") return true;
  if (controller.security == "none") return false;
  return !IsLoopbackHost(controller.host);
}

absl::StatusOr<JobSecurity> PrepareJobSecurity(const ControllerOptions& controller,
                                               const std::string& run_dir) {
  JobSecurity out;
  if (!UsesCurve(controller)) {
    if (!IsLoopbackHost(controller.host)) {
      spdlog::warn(
          "controller.security: none while the controller binds {} (beyond loopback): the "
          "control plane is PLAINTEXT and UNAUTHENTICATED; anyone who reaches the port can join "
          "this job and read its traffic (controller.security: auto or curve adds CURVE keys)",
          controller.host);
    }
    return out;
  }
  std::error_code ec;
  const std::string dir = std::filesystem::absolute(run_dir, ec).string();
  if (ec) return absl::InternalError(absl::StrCat(run_dir, ": ", ec.message()));
  // A resumed run keeps the keys its actors already hold.
  if (!std::filesystem::exists(JobKeyPath(dir, kControllerKeyFile))) {
    RETURN_IF_ERROR(WriteJobKeys(dir));
    spdlog::info("made this job's CURVE keys in {}/{}", dir, kKeysDir);
  }
  ASSIGN_OR_RETURN(out.controller_keys, LoadControllerKeys(JobKeyPath(dir, kControllerKeyFile)));
  out.actor_key_path = JobKeyPath(dir, kActorKeyFile);
  // Children and hand-started actors read it; check it now rather than in each of them.
  RETURN_IF_ERROR(LoadActorKeys(out.actor_key_path).status());
  spdlog::info("control plane: CURVE (controller.security {}); actors need {}", controller.security,
               out.actor_key_path);
  return out;
}

int WarnPlaintextSockets(const JobConfig& config) {
  int n = 0;
  for (const std::string& a : config.sim.addresses) {
    if (a.rfind("tcp://", 0) != 0) continue;  // ipc://, shm://: this host only
    std::string host = a.substr(6, a.rfind(':') > 6 ? a.rfind(':') - 6 : std::string::npos);
    if (IsLoopbackHost(host)) continue;
    spdlog::warn(
        "sim.addresses: {} is reached in plaintext (external sim servers do not take the job's "
        "CURVE keys): keep it on a private network (docs/multi_host.md#security)",
        a);
    ++n;
  }
  return n;
}

}  // namespace rlforge
