// CURVE keys of one job: who may talk to the controller once it binds beyond loopback.
//
// job start -> WriteJobKeys(run_dir) -> runs/NAME/keys/{controller.key, actor.key}
//   controller: LoadControllerKeys -> CURVE server + ZAP check of the actor key
//   actors:     LoadActorKeys (--keys FILE / RLFORGE_KEYS) -> CURVE clients
//
// Two key pairs per job, made with zmq_curve_keypair: the controller's server pair and one
// client pair that every actor of the job shares (a job is one trust domain: whoever holds
// actor.key may join it). controller.key holds the server pair and the actor public key;
// actor.key holds the controller public key and the actor pair. The folder is 0700, the files
// 0600; loading refuses a file that its group or others may read.
//
// File format: text, one `name: value` per line, values Z85 (40 characters); lines that start
// with '#' and blank lines are ignored; unknown names are errors naming file and line.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace rlforge {

inline constexpr char kKeysDir[] = "keys";
inline constexpr char kControllerKeyFile[] = "controller.key";
inline constexpr char kActorKeyFile[] = "actor.key";
// Environment variable naming an actor's key file (the controller sets it for its children).
inline constexpr char kKeysEnv[] = "RLFORGE_KEYS";

// Z85 keys, 40 characters each. A file fills only the fields it holds: controller.key leaves
// actor_secret empty, actor.key leaves controller_secret empty.
struct CurveKeys {
  std::string controller_public;
  std::string controller_secret;
  std::string actor_public;
  std::string actor_secret;
  std::string path;  // the file they came from (for messages)
};

// The texts of a new job's controller.key and actor.key (e.g. for a Kubernetes Secret).
struct JobKeyTexts {
  std::string controller;
  std::string actor;
};
absl::StatusOr<JobKeyTexts> MakeJobKeyTexts();

// Makes the job's two key pairs and writes <run_dir>/keys/ (0700) with controller.key and
// actor.key (0600). Fails if the folder already exists (a resumed run reuses its keys).
absl::Status WriteJobKeys(const std::string& run_dir);

// Loads a key file, checking its permissions (no group/other access) and format.
absl::StatusOr<CurveKeys> LoadActorKeys(const std::string& path);
absl::StatusOr<CurveKeys> LoadControllerKeys(const std::string& path);

// <run_dir>/keys/<file>.
std::string JobKeyPath(const std::string& run_dir, const std::string& file);

}  // namespace rlforge
