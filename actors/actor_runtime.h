// The actor process's main loop.
//
// connect -> Register -> Assignment (config) -> heartbeats start (SETTING_UP, with a phase)
//   -> CreateRole (reports progress) -> IDLE ->
//   loop { WorkRequest -> Role::Handle -> WorkResult } until Shutdown
//
// Two DEALER sockets reach the controller: the work channel (main thread) and
// the heartbeat channel (HeartbeatSender's own thread), so heartbeats keep
// flowing while the role computes. Actors find the controller by address
// only; a process on another host joins with the same code.
#pragma once

#include <atomic>
#include <string>

#include "actors/role.h"
#include "launch/process_launcher.h"

namespace rlforge {

struct ActorOptions {
  std::string connect;  // "tcp://10.0.0.5:40123"
  std::string role;
  int rank = -1;  // -1: any free rank
  // Set by the launcher (RLFORGE_LAUNCH_TOKEN) for the slot it started us in.
  std::string launch_token;
  // The job's actor.key (--keys, or RLFORGE_KEYS): connect as a CURVE client. Empty: plaintext.
  std::string keys_path;
  // How long to keep trying to register (the controller may start later).
  double register_timeout_s = 60;
  // Non-zero (a signal number, or any value from a test) stops the actor; may be null.
  const std::atomic<int>* stop = nullptr;
  // Builds the role the controller assigns (the binary's registry); required.
  RoleFactory create_role = nullptr;
  // Test hook (RLFORGE_TEST_SETUP_DELAY_MS, read by `rlforge actor`): each progress report of
  // the set-up sleeps this long, which makes a checkpoint load as slow as a real model's.
  int setup_delay_ms = 0;
};

// Runs one actor until the controller shuts it down. Returns the exit code:
// 0 after Shutdown (or after leaving on SIGTERM, for a role that may leave), 1 on a failure
// (logged), kConfigErrorExit (2) if the controller refused it (a reject, or its handshake: no
// keys, wrong keys), the key file does not load, or the role's set-up failed on the job's config
// (an IsInputError from the role factory, or a config that does not load), which it first
// reports to the controller (SetupFailed).
int RunActor(const ActorOptions& options);

}  // namespace rlforge
