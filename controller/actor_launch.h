// How a job's actors are started: launch.backend's launcher (local, or Slurm with each actor's
// node and GPUs), the command line of each actor, the address it connects to, and rlforge-store
// where the trainer ranks meet.
//
// config + roles -> placement (Slurm) -> ProcessSpec per actor -> launcher
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "config/job_config.h"
#include "controller/actor_placement.h"
#include "controller/algorithm.h"
#include "controller/controller.h"
#include "controller/job_runner.h"
#include "controller/run_directory.h"
#include "launch/process_launcher.h"
#include "launch/slurm_launcher.h"

namespace rlforge {

// launch.backend's launcher and, under Slurm, the node and GPUs of every launched actor.
struct ActorLaunch {
  LocalProcessLauncher local;
  std::unique_ptr<SlurmProcessLauncher> slurm;
  std::map<std::string, ActorPlace> places;  // by actor id; empty for the local backend
  ProcessLauncher* launcher() {
    if (slurm) return slurm.get();
    return &local;
  }
  void Place(ProcessSpec& spec) const {
    if (auto it = places.find(spec.name); it != places.end()) {
      spec.host = it->second.node;
      spec.gpus = it->second.gpus;
    }
  }
};

// The launcher of launch.backend; under Slurm, every actor placed on a node of the allocation.
absl::Status SetUpLaunch(const JobConfig& config, const std::vector<RoleRequirement>& roles,
                         ActorLaunch* out);

// Where actors join: tcp://HOST:PORT with the host other hosts reach this one by
// (controller.advertise_host, the bound address, or this host's name for a wildcard bind).
std::string JoinAddress(const std::string& endpoint, const ControllerOptions& c);

// Where launched actors connect: Slurm steps on other nodes as any other host joins; local
// children reach a wildcard bind over loopback.
std::string ActorConnectAddress(const std::string& endpoint, const JobConfig& config);

// Starts rlforge-store, the trainer ranks' rendezvous point for the job's lifetime (a service:
// its exit stops the job, and shutdown stops it), and gives the controller its host:port once
// it listens. Its own process, so that this one never loads libtorch.
absl::Status StartTrainerStore(Controller& controller, const RunDirectory& dir,
                               const RunOptions& options, const ControllerOptions& c);

// How the controller starts one of its actors (before placement).
ProcessSpec LaunchedActorSpec(const ActorInfo& a, const std::string& self_exe,
                              const std::string& log_level, const std::string& connect,
                              const std::string& log_path, const std::string& actor_key_path);

}  // namespace rlforge
