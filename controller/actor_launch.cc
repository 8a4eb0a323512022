#include "controller/actor_launch.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/logging.h"
#include "common/net_address.h"
#include "common/status.h"
#include "controller/job_keys.h"

namespace rlforge {

namespace {

// rlforge-store's command line: at controller.store_port, reachable (and advertised) where the
// controller is; a loopback-only job keeps its store on loopback.
std::vector<std::string> StoreArgv(const std::string& exe, const ControllerOptions& c,
                                   const std::string& address_file) {
  const bool local = IsLoopbackHost(c.host) && c.advertise_host.empty();
  const std::string here = IsWildcardHost(c.host) || IsLoopbackHost(c.host) ? "127.0.0.1" : c.host;
  std::vector<std::string> argv = {
      exe, "--host", here, "--port", std::to_string(c.store_port), "--address-file", address_file};
  if (!local) {
    argv.push_back("--advertise");
    argv.push_back(AdvertisedHost(c.host, c.advertise_host, LocalHostName()));
  }
  return argv;
}

}  // namespace

absl::Status SetUpLaunch(const JobConfig& config, const std::vector<RoleRequirement>& roles,
                         ActorLaunch* out) {
  if (!UnderSlurm(config.launch)) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::vector<std::string> allocation, AllocationNodes(30));
  ASSIGN_OR_RETURN(std::vector<std::string> nodes, JobNodes(config, std::move(allocation)));
  ASSIGN_OR_RETURN(std::vector<RoleSlots> slots, PlacementSlots(config, roles));
  ASSIGN_OR_RETURN(out->places, PlaceActors(slots, nodes));
  out->slurm = std::make_unique<SlurmProcessLauncher>(&out->local);
  for (const auto& [id, place] : out->places) {
    spdlog::info("{} runs on {}{}", id, place.node,
                 place.gpus > 0 ? absl::StrCat(" with ", place.gpus, " GPU(s)") : "");
  }
  return absl::OkStatus();
}

std::string JoinAddress(const std::string& endpoint, const ControllerOptions& c) {
  const size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos) return endpoint;
  return absl::StrCat("tcp://", AdvertisedHost(c.host, c.advertise_host, LocalHostName()),
                      endpoint.substr(colon));
}

std::string ActorConnectAddress(const std::string& endpoint, const JobConfig& config) {
  if (UnderSlurm(config.launch)) return JoinAddress(endpoint, config.controller);
  const std::string wildcard = "tcp://0.0.0.0:";
  if (endpoint.rfind(wildcard, 0) != 0) return endpoint;
  return "tcp://127.0.0.1:" + endpoint.substr(wildcard.size());
}

absl::Status StartTrainerStore(Controller& controller, const RunDirectory& dir,
                               const RunOptions& options, const ControllerOptions& c) {
  const double timeout_s = c.register_timeout_s;
  const std::string file = dir.path() + "/trainer_store.address";
  // A resumed or restarted job runs in the same directory: the last store's address is stale.
  std::error_code ec;
  std::filesystem::remove(file, ec);
  ProcessSpec spec;
  spec.name = "trainer-store";
  spec.argv = StoreArgv(StoreExecutable(options.self_exe), c, file);
  spec.log_path = dir.LogPath(spec.name);
  controller.set_awaiting_trainer_store();  // actors that join by address may come first
  RETURN_IF_ERROR(controller.LaunchService(spec));
  const int64_t deadline = RealClock::Get()->NowMicros() + static_cast<int64_t>(timeout_s * 1e6);
  while (true) {
    std::ifstream in(file);
    std::string address;
    if (in >> address) {  // written whole (renamed into place)
      spdlog::info("trainer ranks meet at {}", address);
      controller.set_trainer_store_address(address);
      return absl::OkStatus();
    }
    RETURN_IF_ERROR(controller.Pump(50));  // notices the store's exit, with its log
    if (RealClock::Get()->NowMicros() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "the trainer ranks' rendezvous store did not report its address in ", file, " within ",
          timeout_s, " s (controller.register_timeout_s); its log: ", spec.log_path));
    }
  }
}

ProcessSpec LaunchedActorSpec(const ActorInfo& a, const std::string& self_exe,
                              const std::string& log_level, const std::string& connect,
                              const std::string& log_path, const std::string& actor_key_path) {
  ProcessSpec spec;
  spec.name = a.id;
  // rlforge-actor directly: `rlforge actor` would only exec it.
  spec.argv = {ActorExecutable(self_exe),
               "--role",
               a.role,
               "--rank",
               std::to_string(a.rank),
               "--connect",
               connect,
               "--log-level",
               log_level};
  spec.log_path = log_path;
  // libgomp reads this before main(): idle OpenMP threads must not spin
  // against OpenBLAS's own threads (measured: 40% of a 2-core machine).
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) spec.env["OMP_WAIT_POLICY"] = "PASSIVE";
  // Empty without CURVE: a RLFORGE_KEYS of the caller must not reach a plaintext job.
  spec.env[kKeysEnv] = actor_key_path;
  return spec;
}

}  // namespace rlforge
