// rlforge-actor: the actor roles (trainer, rollout, reward, ...), the part of
// rlforge that needs libtorch. `rlforge actor ARGS` runs this binary with
// ARGS; the controller starts it directly. Kept apart so that the controller,
// `validate`, `sim-server` and `status` do not pay libtorch's start-up
// (~0.35 s of loading ~300 shared libraries and registering operators with
// Debian's libtorch) before doing anything.
//
//   rlforge-actor --role R --connect tcp://HOST:PORT [--rank K] [--register-timeout S]
//                 [--log-level L] [--keys actor.key]
#include <malloc.h>

#include <cstdlib>

#include "CLI/CLI.hpp"
#include "actors/actor_runtime.h"
#include "cli/role_registry.h"
#include "cli/signals.h"
#include "common/logging.h"
#include "proto/curve_keys.h"

int main(int argc, char** argv) {
  // Reuse freed tensor memory instead of returning it to the kernel: large
  // per-step activations otherwise cost a page-fault storm every step.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  CLI::App app{"rlforge actor: join a running job as one actor"};
  app.name("rlforge actor");
  rlforge::ActorOptions o;
  std::string log_level = "info";
  app.add_option("--role", o.role, "Role to take (e.g. rollout)")->required();
  app.add_option("--connect", o.connect, "Controller address, tcp://HOST:PORT")->required();
  app.add_option("--rank", o.rank, "Rank to take (default: any free one)");
  app.add_option("--register-timeout", o.register_timeout_s, "Seconds to keep trying to register");
  app.add_option("--log-level", log_level, "trace, debug, info, warn or error");
  app.add_option("--keys", o.keys_path,
                 "The job's CURVE key file, runs/NAME/keys/actor.key (default: $RLFORGE_KEYS); "
                 "needed when the controller binds beyond loopback");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  const char* token = std::getenv("RLFORGE_LAUNCH_TOKEN");
  if (token != nullptr) o.launch_token = token;
  const char* keys = std::getenv(rlforge::kKeysEnv);
  if (o.keys_path.empty() && keys != nullptr) o.keys_path = keys;
  rlforge::InitLogging(o.rank >= 0 ? o.role + "-" + std::to_string(o.rank) : o.role, log_level);
  rlforge::InstallSignalHandlers();
  o.stop = &rlforge::StopFlag();
  o.create_role = &rlforge::CreateRole;
  // Test-only (tests/byo_model_test.cc): a set-up as slow as a real checkpoint's.
  if (const char* delay = std::getenv("RLFORGE_TEST_SETUP_DELAY_MS"); delay != nullptr) {
    o.setup_delay_ms = std::atoi(delay);
  }
  return rlforge::RunActor(o);
}
