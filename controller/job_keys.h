// The job's control-plane security, as controller.security asks (docs/multi_host.md#security).
//
// controller.security + controller.host -> CURVE or not -> keys made (new run) or loaded
// (--resume) in runs/NAME/keys/ -> the controller's server keys + the path actors get
//
// A loopback-only job under `auto` has no keys and no keys folder.
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "config/job_config.h"
#include "proto/curve_keys.h"

namespace rlforge {

struct JobSecurity {
  std::optional<CurveKeys> controller_keys;  // set: the controller socket is a CURVE server
  std::string actor_key_path;                // absolute path of actor.key; empty without CURVE
};

// Makes the run's keys (or reuses those a resumed run already has) when CURVE is on; warns
// loudly when the job binds beyond loopback in plaintext.
absl::StatusOr<JobSecurity> PrepareJobSecurity(const ControllerOptions& controller,
                                               const std::string& run_dir);

// Warns about each socket of the job that CURVE does not cover and that leaves this host: an
// external sim server (sim.addresses) reached over tcp beyond loopback. Returns how many.
int WarnPlaintextSockets(const JobConfig& config);

}  // namespace rlforge
