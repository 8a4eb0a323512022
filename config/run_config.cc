#include "config/run_config.h"

#include "absl/strings/str_cat.h"
#include "common/host_address.h"

namespace rlforge {

namespace {

using config::Schema;
using config::SchemaBuilder;

// The table's names and summaries: docs/config.md cannot drift from the registry.
std::string AlgorithmDoc() {
  std::string doc = "The training loop:";
  const auto& all = Algorithms();
  for (size_t i = 0; i < all.size(); ++i) {
    absl::StrAppend(&doc, i == 0 ? " " : "; ", "`", all[i].name, "` (", all[i].summary, ")");
  }
  return doc + ".";
}

bool ParseAlgorithm(const YAML::Node& n, const AlgorithmSpec** out, std::string* why) {
  std::string name;
  if (!config::MakeChoiceParser(AlgorithmNames())(n, &name, why)) return false;
  *out = FindAlgorithm(name);
  return true;
}

// Why job.algorithm cannot checkpoint the whole job, or "" when it can.
std::string NoCheckpointReason(const AlgorithmSpec& a) {
  switch (a.family) {
    case AlgorithmFamily::kControlPpo:
    case AlgorithmFamily::kLmRl:
    case AlgorithmFamily::kSft:
    case AlgorithmFamily::kDpo:
      return "";
    case AlgorithmFamily::kEcho:
      return "has no state to checkpoint";
  }
  return "";
}

// controller.keys only with CURVE on.
void CheckControllerKeys(const JobConfig& c, config::CheckContext& ctx) {
  if (c.controller.keys.empty() || UsesCurve(c.controller)) return;
  ctx.Error("controller.keys",
            absl::StrCat("keys are for CURVE, which this job does not use (controller.security ",
                         ChoiceName(c.controller.security), " with controller.host ",
                         c.controller.host, "); leave it out, or set controller.security: curve"));
}

void CheckCheckpointEvery(const JobConfig& c, config::CheckContext& ctx) {
  if (c.job.algorithm == nullptr || c.checkpoint.every == 0) return;
  const std::string why = NoCheckpointReason(*c.job.algorithm);
  if (!why.empty()) {
    ctx.Error("checkpoint.every", absl::StrCat("job.algorithm ", c.job.algorithm->name, " ", why,
                                               "; got ", c.checkpoint.every, " (set 0)"));
  }
  // Asynchronous language-model runs record their groups in flight (RolloutDispatcher);
  // asynchronous ppo does not.
  if (c.rollout.max_staleness > 0 && !c.job.algorithm->lm_engines) {
    ctx.Error("checkpoint.every",
              absl::StrCat("asynchronous runs (rollout.max_staleness ", c.rollout.max_staleness,
                           ") have groups in flight that a checkpoint does not hold; got ",
                           c.checkpoint.every, " (set 0, or rollout.max_staleness: 0)"));
  }
}

void CheckEcho(const JobConfig& c, config::CheckContext& ctx) {
  if (c.job.algorithm != nullptr && c.job.algorithm->Reads("echo") && c.echo.workers < 1) {
    ctx.Error("echo.workers", "job.algorithm is echo, which needs at least 1 echo worker");
  }
  const int64_t payload = c.echo.payload_bytes * c.echo.tensors;
  if (payload > c.controller.max_message_mb * (int64_t{1} << 20)) {
    ctx.Error("echo.payload_bytes", absl::StrCat("echo.payload_bytes x echo.tensors = ", payload,
                                                 " bytes exceeds controller.max_message_mb"));
  }
}

}  // namespace

std::shared_ptr<const Schema> JobSection() {
  SchemaBuilder<JobOptions> b("What to run and where its results go.");
  b.String("name", &JobOptions::name,
           "Run name; the run directory is job.run_root/job.name. Default: the job file's "
           "name. An existing directory gets a numeric suffix.");
  b.Typed<const AlgorithmSpec*>("algorithm", &JobOptions::algorithm, AlgorithmDoc(),
                                config::ChoiceType(AlgorithmNames()), ParseAlgorithm,
                                [](const AlgorithmSpec* const& a) {
                                  return a == nullptr ? YAML::Node() : YAML::Node(a->name);
                                })
      .Required();
  b.Int("seed", &JobOptions::seed, "Seed for every random choice in the job.").Min(0);
  b.Int("iterations", &JobOptions::iterations, "Iterations of the training loop.").Min(1);
  b.String("run_root", &JobOptions::run_root, "Folder that holds run directories.");
  b.Enum("log_level", &JobOptions::log_level, "Log level of the controller and every actor.");
  b.Check([](const JobOptions& j, config::CheckContext& ctx) {
    if (!j.name.empty() && j.name.find('/') != std::string::npos) {
      ctx.Error("name", "must not contain '/' (it names a folder under job.run_root)");
    }
  });
  return b.Build();
}

std::shared_ptr<const Schema> ControllerSection() {
  SchemaBuilder<ControllerOptions> b("The controller's socket, heartbeats and time limits.");
  b.String("host", &ControllerOptions::host,
           "Address the controller binds; actors on other hosts connect here.");
  b.Int("port", &ControllerOptions::port, "TCP port; 0 picks a free one.").Min(0).Max(65535);
  b.Int("store_port", &ControllerOptions::store_port,
        "TCP port of the trainer ranks' rendezvous store (rlforge-store, also where trainer rank "
        "0 and the engines form the gloo weight group); 0 picks a free one. Fix it when a "
        "firewall or a Kubernetes Service must name it.")
      .Min(0)
      .Max(65535);
  b.String("advertise_host", &ControllerOptions::advertise_host,
           "The address actors on other hosts use to reach this host (the store's address "
           "handed to trainer ranks and engines, the join command printed). Empty: "
           "controller.host, or this host's name when controller.host is a wildcard "
           "(0.0.0.0); set it to a Kubernetes Service name or an IP the others can route to.");
  b.Enum("security", &ControllerOptions::security,
         "ZeroMQ CURVE on the control plane (docs/multi_host.md#security). auto: CURVE exactly "
         "when controller.host is not loopback (127.0.0.0/8, ::1, localhost); curve: always, "
         "with per-job keys in runs/NAME/keys/ (actors need actor.key: --keys or RLFORGE_KEYS); "
         "none: plaintext, even off loopback (logged as a warning: anyone who reaches the "
         "port can join the job).");
  b.String("keys", &ControllerOptions::keys,
           "A folder holding controller.key and actor.key to use instead of making new keys in "
           "runs/NAME/keys/ (e.g. the Kubernetes Secret `rlforge k8s` writes, mounted). Only "
           "with CURVE on (controller.security).");
  b.Int("heartbeat_interval_ms", &ControllerOptions::heartbeat_interval_ms,
        "How often every actor sends a heartbeat.")
      .Min(10)
      .Max(60000);
  b.Int("heartbeat_misses", &ControllerOptions::heartbeat_misses,
        "Missed heartbeats after which an actor is declared dead.")
      .Min(1)
      .Max(100);
  b.Int("max_message_mb", &ControllerOptions::max_message_mb,
        "Largest message (envelope plus tensors) accepted, in MiB; larger ones are dropped.")
      .Min(1)
      .Max(65536);
  b.Double("register_timeout_s", &ControllerOptions::register_timeout_s,
           "How long to wait for every actor to register at start.")
      .Min(0, false);
  b.Double("request_timeout_s", &ControllerOptions::request_timeout_s,
           "How long one unit of work may take before the job stops.")
      .Min(0, false);
  b.Double("setup_timeout_s", &ControllerOptions::setup_timeout_s,
           "How long an actor may take to set up after registering (load its checkpoint, build "
           "its model) before the job stops naming it and its phase. Heartbeats flow during "
           "set-up, so heartbeat silence is no limit on it.")
      .Min(0, false);
  b.Double("shutdown_grace_s", &ControllerOptions::shutdown_grace_s,
           "How long actors get to exit after a shutdown before they are killed.")
      .Min(0);
  return b.Build();
}

std::shared_ptr<const Schema> CheckpointSection() {
  SchemaBuilder<CheckpointOptions> b(
      "Whole-job checkpoints: models, optimizer state, every RNG, the data position and the "
      "loop's counters, for `rlforge run --resume` (docs/checkpoints.md).");
  b.Int("every", &CheckpointOptions::every,
        "Iterations between checkpoints (sft: iterations of sft.steps_per_iteration "
        "optimiser steps); 0: none. When set, the first Ctrl-C (SIGINT or "
        "SIGTERM) finishes the iteration under way, checkpoints and stops; a second stops at "
        "once.")
      .Min(0);
  b.Int("keep", &CheckpointOptions::keep,
        "Complete checkpoints kept (the newest); older ones are deleted once a new one is "
        "complete.")
      .Min(1);
  return b.Build();
}

std::shared_ptr<const Schema> EchoSection() {
  SchemaBuilder<EchoOptions> b(
      "Transport self-test (`job.algorithm: echo`): every request carries random tensors "
      "that each actor returns with its own checksum; the controller compares bytes.");
  b.Int("workers", &EchoOptions::workers, "Echo actors.").Min(0).Max(1024);
  b.Bool("external", &EchoOptions::external,
         "Do not start the actors; wait for them to join with `rlforge actor`.");
  b.Int("requests_per_iteration", &EchoOptions::requests_per_iteration,
        "Round trips per actor per iteration.")
      .Min(1);
  b.Int("payload_bytes", &EchoOptions::payload_bytes, "Bytes per tensor.").Min(0);
  b.Int("tensors", &EchoOptions::tensors, "Tensors per request.").Min(0).Max(1024);
  b.Int("work_micros", &EchoOptions::work_micros, "Simulated work per request, microseconds.")
      .Min(0);
  return b.Build();
}

bool UsesCurve(const ControllerOptions& controller) {
  switch (controller.security) {
    case Security::kCurve:
      return true;
    case Security::kNone:
      return false;
    case Security::kAuto:
      return !IsLoopbackHost(controller.host);
  }
  return true;
}

void CheckRunKeys(const JobConfig& c, config::CheckContext& ctx) {
  CheckControllerKeys(c, ctx);
  CheckCheckpointEvery(c, ctx);
  CheckEcho(c, ctx);
}

}  // namespace rlforge
