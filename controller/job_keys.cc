#include "controller/job_keys.h"

#include <filesystem>

#include "common/host_address.h"
#include "common/logging.h"
#include "common/status.h"

namespace rlforge {

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
  // Keys given (controller.keys: a mounted Kubernetes Secret) or the run's own, made once: a
  // resumed run keeps the keys its actors already hold.
  std::string keys = controller.keys.empty()
                         ? absl::StrCat(dir, "/", kKeysDir)
                         : std::filesystem::absolute(controller.keys, ec).string();
  if (controller.keys.empty() && !std::filesystem::exists(JobKeyPath(dir, kControllerKeyFile))) {
    RETURN_IF_ERROR(WriteJobKeys(dir));
    spdlog::info("made this job's CURVE keys in {}", keys);
  }
  absl::StatusOr<CurveKeys> loaded =
      LoadControllerKeys(absl::StrCat(keys, "/", kControllerKeyFile));
  if (!loaded.ok()) {
    return Annotate(loaded.status(),
                    controller.keys.empty() ? "the run's keys" : "controller.keys");
  }
  out.controller_keys = *std::move(loaded);
  out.actor_key_path = absl::StrCat(keys, "/", kActorKeyFile);
  // Children and hand-started actors read it; check it now rather than in each of them.
  RETURN_IF_ERROR(LoadActorKeys(out.actor_key_path).status());
  spdlog::info("control plane: CURVE (controller.security {}); actors need {}",
               ChoiceName(controller.security), out.actor_key_path);
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
