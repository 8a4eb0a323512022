#include "config/job_config.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/host_address.h"
#include "config/build_info.h"
#include "config/control_config.h"
#include "config/dashboard_config.h"
#include "config/device.h"
#include "config/engine_config.h"
#include "config/grpo_config.h"
#include "config/lm_config.h"
#include "config/policy_loss_registry.h"
#include "config/reward_config.h"

namespace rlforge {

namespace {

// Engines a language-model job's fleet may hold (rollout.workers).
constexpr int64_t kMaxLmEngines = 64;

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

bool Reads(const AlgorithmSpec& a, const std::string& section) {
  return std::find(a.sections.begin(), a.sections.end(), section) != a.sections.end();
}

// Whether the job's algorithm leaves `section` unread: another algorithm's section.
bool Unread(const JobConfig& c, const std::string& section) {
  return c.job.algorithm != nullptr && IsAlgorithmSection(section) &&
         !Reads(*c.job.algorithm, section);
}

// A section that some algorithm reads, written for one that does not, would do nothing: an
// error however little it says (`env: {id: CartPole-v1}` in a grpo job holds only a default).
// The resolved config leaves such sections out (ResolvedYaml), so it loads again.
void CheckAlgorithmSections(const JobConfig& c, config::CheckContext& ctx) {
  for (const config::Field& f : JobSchema().fields) {
    if (f.kind != config::Field::Kind::kSection || !Unread(c, f.name) || !ctx.Written(f.name)) {
      continue;
    }
    ctx.Error(f.name, absl::StrCat("job.algorithm ", c.job.algorithm->name,
                                   " does not read this section (it reads: ",
                                   absl::StrJoin(c.job.algorithm->sections, ", "), "); remove it"));
  }
}

// rollout.max_workers / min_workers and reward's: language-model loops (synchronous or not) and
// the synchronous control PPO loop take joiners and wait for a minimum; every cap within what
// the job can hold.
void CheckElasticWorkers(const JobConfig& c, config::CheckContext& ctx) {
  if (c.job.algorithm == nullptr) return;
  const AlgorithmFamily family = c.job.algorithm->family;
  const bool lm = family == AlgorithmFamily::kLmRl || family == AlgorithmFamily::kDpo;
  const bool ppo = family == AlgorithmFamily::kControlPpo;
  std::string unsupported;
  if (!lm && !ppo) {
    unsupported = absl::StrCat("job.algorithm ", c.job.algorithm->name,
                               " does not take joining workers (language-model and ppo jobs do)");
  } else if (ppo && c.rollout.max_staleness > 0) {
    unsupported = absl::StrCat("asynchronous runs (rollout.max_staleness ", c.rollout.max_staleness,
                               ") do not take joining workers; set rollout.max_staleness: 0");
  }
  struct Role {
    std::string section;
    int64_t workers, max_workers, min_workers;
  };
  const Role roles[] = {
      {"rollout", c.rollout.workers, c.rollout.max_workers, c.rollout.min_workers},
      {"reward", c.reward.workers, c.reward.max_workers, c.reward.min_workers}};
  for (const Role& r : roles) {
    if (r.section == "reward" && !lm) continue;  // only language-model jobs read it
    const int64_t cap = WorkerCap(r.workers, r.max_workers);
    const std::string max_key = r.section + ".max_workers", min_key = r.section + ".min_workers";
    if (!unsupported.empty()) {
      if (r.max_workers != 0 && r.max_workers != r.workers) {
        ctx.Error(max_key, absl::StrCat(unsupported, "; got ", r.max_workers, " (leave it out)"));
      }
      if (r.min_workers != 1) {
        ctx.Error(min_key, absl::StrCat(unsupported, "; got ", r.min_workers, " (leave it out)"));
      }
      continue;
    }
    if (r.max_workers != 0 && r.max_workers < r.workers) {
      ctx.Error(max_key, absl::StrCat("must be at least ", r.section, ".workers (", r.workers,
                                      "), got ", r.max_workers));
    }
    if (ppo && r.max_workers > r.workers && c.sim.backend != "inprocess") {
      // The servers are started (or listed in sim.addresses) per configured worker at the
      // start, on the controller's host: a joiner, from any host, would have none to reach.
      ctx.Error(max_key, absl::StrCat("joining workers step their envs in process: set "
                                      "sim.backend: inprocess (got ",
                                      c.sim.backend, "), or leave rollout.max_workers out; got ",
                                      r.max_workers));
    }
    if (lm && r.section == "rollout" && r.max_workers > kMaxLmEngines) {
      ctx.Error(max_key, absl::StrCat("language-model jobs run at most ", kMaxLmEngines,
                                      " rollout engines (each holds a copy of the policy and "
                                      "loads every version), got ",
                                      r.max_workers));
    }
    if (r.min_workers > cap) {
      ctx.Error(min_key, absl::StrCat("must not exceed ", max_key, " (", cap,
                                      r.max_workers == 0 ? ", from " + r.section + ".workers" : "",
                                      "), got ", r.min_workers));
    }
  }
}

// Why `family` trains on one rank whatever trainer.ranks says, or "" when its trainer shards
// over the ranks.
std::string OneRankReason(AlgorithmFamily family) {
  switch (family) {
    case AlgorithmFamily::kEcho:
      return "starts no trainer";
    case AlgorithmFamily::kControlPpo:
      return "trains its control policy on one rank";
    case AlgorithmFamily::kSft:
    case AlgorithmFamily::kLmRl:
    case AlgorithmFamily::kDpo:
      return "";
  }
  return "";
}

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
  b.Choice("log_level", &JobOptions::log_level, {"trace", "debug", "info", "warn", "error"},
           "Log level of the controller and every actor.");
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
  b.Choice("security", &ControllerOptions::security, {"auto", "curve", "none"},
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

std::shared_ptr<const Schema> RolePlacementSection(const std::string& role, bool packed) {
  SchemaBuilder<RolePlacementOptions> b(absl::StrCat(
      "Where ", role, " actors run (launch.backend slurm): ",
      packed ? "ranks are packed in rank order, each node filled to per_node before the next."
             : "workers are dealt round-robin over the allowed nodes."));
  b.IntList("nodes", &RolePlacementOptions::nodes,
            "Indices (from 0) of the allocation's nodes the role may use; empty: every node.");
  b.Int("per_node", &RolePlacementOptions::per_node,
        "Most actors of the role on one node; 0: no limit.")
      .Min(0);
  b.Int("gpus", &RolePlacementOptions::gpus,
        "GPUs per actor: its step gets `srun --gpus-per-task`, and Slurm sets "
        "CUDA_VISIBLE_DEVICES; under launch.backend kubernetes, its pod's nvidia.com/gpu "
        "request (`rlforge k8s`).")
      .Min(0)
      .Max(64);
  b.Check([](const RolePlacementOptions& p, config::CheckContext& ctx) {
    for (size_t i = 0; i < p.nodes.size(); ++i) {
      if (p.nodes[i] < 0) {
        ctx.Error("nodes", absl::StrCat("node indices start at 0, got ", p.nodes[i]));
      }
      for (size_t j = 0; j < i; ++j) {
        if (p.nodes[j] == p.nodes[i]) {
          ctx.Error("nodes", absl::StrCat("node ", p.nodes[i], " is listed twice"));
        }
      }
    }
  });
  return b.Build();
}

std::shared_ptr<const Schema> PlacementSection() {
  SchemaBuilder<PlacementOptions> b(
      "Per-role placement on the allocation's nodes (launch.backend slurm; "
      "docs/multi_host.md).");
  b.Section("trainer", &PlacementOptions::trainer, RolePlacementSection("trainer", true));
  b.Section("rollout", &PlacementOptions::rollout, RolePlacementSection("rollout", false));
  b.Section("reward", &PlacementOptions::reward, RolePlacementSection("reward", false));
  return b.Build();
}

std::shared_ptr<const Schema> LaunchSection() {
  SchemaBuilder<LaunchOptions> b("How actor processes are started.");
  b.Choice("backend", &LaunchOptions::backend, {"local", "slurm", "kubernetes"},
           "`local`: the controller starts actors as child processes on this host. `slurm`: "
           "inside a Slurm allocation (salloc, sbatch, or `rlforge slurm`), each actor is an "
           "`srun --overlap` step on the node launch.placement names; controller.host "
           "127.0.0.1 then means 0.0.0.0, and actors connect to this host's name. "
           "`kubernetes`: it starts none; every role, trainer ranks included, joins by address "
           "(`rlforge actor --role R --rank K --connect ADDR`), so rollout.external, "
           "reward.external and echo.external are implied (setting one false is an error); "
           "see docs/multi_host.md.");
  b.Int("nodes", &LaunchOptions::nodes,
        "Slurm: how many of the allocation's nodes the job uses (the first ones), and how many "
        "`rlforge slurm` asks for; 0: every node of the allocation, and `rlforge slurm` asks "
        "for the fewest that launch.placement needs.")
      .Min(0)
      .Max(100000);
  b.Section("placement", &LaunchOptions::placement, PlacementSection());
  b.Int("max_restarts", &LaunchOptions::max_restarts,
        "Relaunches allowed per role over the job when a rollout, reward or sim worker is lost "
        "(exits, misses heartbeats, or overruns controller.request_timeout_s); its work is "
        "dealt again either way. 0: lost workers are not replaced.")
      .Min(0)
      .Max(10000);
  b.Double("restart_backoff_s", &LaunchOptions::restart_backoff_s,
           "Wait before relaunching a lost worker, doubled for each earlier relaunch of the same "
           "slot (at most 30 s).")
      .Min(0);
  b.Int("max_job_restarts", &LaunchOptions::max_job_restarts,
        "Times the whole job starts again, in the same run directory, from its newest complete "
        "checkpoint (from the beginning if it has none) when an actor that cannot be replaced "
        "is lost: a trainer rank, or a rollout engine on the gloo weight plane. 0: such a loss "
        "stops the job.")
      .Min(0)
      .Max(1000);
  return b.Build();
}

// Keys that only the Slurm backend reads, and settings that cannot work across its nodes.
void CheckLaunchBackend(const JobConfig& c, config::CheckContext& ctx) {
  const PlacementOptions& p = c.launch.placement;
  const std::pair<const char*, const RolePlacementOptions*> roles[] = {
      {"trainer", &p.trainer}, {"rollout", &p.rollout}, {"reward", &p.reward}};
  if (EveryRoleJoins(c.launch)) {  // `rlforge k8s` turns gpus into the pods' GPU requests
    const char* why =
        "launch.backend kubernetes leaves node choice to the Kubernetes scheduler (of the "
        "placement keys only gpus applies there: each pod's nvidia.com/gpu request)";
    if (c.launch.nodes != 0) ctx.Error("launch.nodes", why);
    for (const auto& [role, rp] : roles) {
      if (!rp->nodes.empty()) ctx.Error(absl::StrCat("launch.placement.", role, ".nodes"), why);
      if (rp->per_node != 0) {
        ctx.Error(absl::StrCat("launch.placement.", role, ".per_node"), why);
      }
    }
    return;
  }
  if (!UnderSlurm(c.launch)) {
    const char* why =
        "only launch.backend slurm places actors on nodes (local runs every actor on this "
        "host); remove it or set launch.backend: slurm";
    if (c.launch.nodes != 0) ctx.Error("launch.nodes", why);
    for (const auto& [role, rp] : roles) {
      if (!(*rp == RolePlacementOptions{})) {
        ctx.Error(absl::StrCat("launch.placement.", role), why);
      }
    }
    return;
  }
  const bool external[] = {false, c.rollout.external, c.reward.external};
  for (int i = 0; i < 3; ++i) {
    if (external[i] && !(*roles[i].second == RolePlacementOptions{})) {
      ctx.Error(absl::StrCat("launch.placement.", roles[i].first),
                absl::StrCat(roles[i].first,
                             ".external is set: those actors join by address, and nothing "
                             "places them"));
    }
  }
  if (IsLoopbackHost(c.controller.host) && c.controller.host != "127.0.0.1") {
    ctx.Error("controller.host",
              absl::StrCat("launch.backend slurm starts actors on other nodes, which cannot "
                           "reach loopback address ",
                           c.controller.host, "; leave the default or name this host's address"));
  }
  if (c.sim.backend == "server") {
    ctx.Error("sim.backend",
              "server starts sim servers on the controller's host, reached through shared "
              "memory or a Unix socket; Slurm steps run on other nodes (use inprocess, or "
              "external with addresses the nodes reach)");
  }
  if (c.weights.transport == WeightTransport::kShm) {
    ctx.Error("weights.transport",
              "shm reaches only processes on the trainer's host; Slurm steps run on other "
              "nodes (use auto, zmq or gloo)");
  }
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

std::shared_ptr<const Schema> LoraSection() {
  SchemaBuilder<LoraOptions> b(
      "Low-rank adapters (docs/lora.md): the base weights stay frozen; only A and B of each "
      "target module train and hold optimizer state. Language-model algorithms only.");
  b.Int("rank", &LoraOptions::rank, "Adapter rank r; 0 trains the full model.").Min(0).Max(4096);
  b.Double("alpha", &LoraOptions::alpha, "Scaling numerator: the update is (alpha / r) B A x.")
      .Min(0, false);
  b.Double("dropout", &LoraOptions::dropout, "Dropout on the adapter's input while training.")
      .Min(0)
      .Max(1, false);
  b.StringList("target_modules", &LoraOptions::target_modules,
               "Projections that get an adapter, in every layer: q_proj, k_proj, v_proj, o_proj, "
               "gate_proj, up_proj, down_proj.");
  b.Check([](const LoraOptions& l, config::CheckContext& ctx) {
    static const std::vector<std::string> kModules = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                      "gate_proj", "up_proj", "down_proj"};
    if (ctx.Written("target_modules") && l.rank == 0) {
      ctx.Error("rank", "target_modules is set but rank is 0 (LoRA off): set rank > 0");
    }
    if (l.target_modules.empty()) ctx.Error("target_modules", "expected at least one module");
    for (const std::string& m : l.target_modules) {
      if (std::find(kModules.begin(), kModules.end(), m) == kModules.end()) {
        ctx.Error("target_modules", absl::StrCat("unknown module '", m, "'; expected one of ",
                                                 absl::StrJoin(kModules, ", ")));
      }
    }
  });
  return b.Build();
}

std::shared_ptr<const Schema> TrainerSection() {
  SchemaBuilder<TrainerOptions> b("The learner: ranks, threads and the AdamW optimiser.");
  b.Int("ranks", &TrainerOptions::ranks,
        "Trainer processes, each holding a shard of the model and optimiser state; rank 0 "
        "leads (its reply carries the weights and metrics). Language-model jobs shard over "
        "them; ppo trains its control policy on 1.")
      .Min(1)
      .Max(64);
  b.Int("threads", &TrainerOptions::threads,
        "Intra-op threads per trainer rank; 0 divides this host's cores among the ranks.")
      .Min(0);
  b.Double("collective_timeout_s", &TrainerOptions::collective_timeout_s,
           "Deadline of every collective between trainer ranks and of their rendezvous; a rank "
           "that died or hangs fails its peers within it.")
      .Min(0, false);
  b.Double("lr", &TrainerOptions::lr, "Peak learning rate.").Min(0, false);
  b.Choice("lr_schedule", &TrainerOptions::lr_schedule, {"constant", "linear", "cosine"},
           "Decay after warm-up: constant, linear to min_lr_ratio*lr, or cosine to it.");
  b.Int("warmup_steps", &TrainerOptions::warmup_steps, "Optimiser steps of linear warm-up.").Min(0);
  b.Double("min_lr_ratio", &TrainerOptions::min_lr_ratio,
           "Final learning rate as a fraction of lr (linear and cosine schedules).")
      .Min(0)
      .Max(1);
  b.Double("adam_beta1", &TrainerOptions::adam_beta1, "AdamW beta1.").Min(0).Max(1, false);
  b.Double("adam_beta2", &TrainerOptions::adam_beta2, "AdamW beta2.").Min(0).Max(1, false);
  b.Double("adam_eps", &TrainerOptions::adam_eps, "AdamW epsilon.").Min(0, false);
  b.Double("weight_decay", &TrainerOptions::weight_decay, "AdamW decoupled weight decay.").Min(0);
  b.Double("max_grad_norm", &TrainerOptions::max_grad_norm,
           "Clip the global gradient norm to this; 0 disables clipping.")
      .Min(0);
  b.Bool("reshard_after_forward", &TrainerOptions::reshard_after_forward,
         "With several ranks: free each layer's gathered parameters after its forward and "
         "gather them again for its backward (ZeRO-3, least memory), or keep them until its "
         "backward (one all-gather fewer per layer, a full model's parameters at the peak).");
  b.Choice("mixed_precision", &TrainerOptions::mixed_precision, {"none", "bf16"},
           "`bf16`: gather parameters and compute forward and backward in bfloat16, keeping "
           "fp32 master weights, optimizer state and gradient reduction. `none`: fp32 "
           "throughout (the CPU default).");
  b.String("device", &TrainerOptions::device,
           "Where language-model trainer ranks compute: cpu, cuda (rank r on its host's GPU r) "
           "or cuda:N. The policy, reference and critic, their gradients and AdamW state live "
           "there. Several ranks on GPUs form an NCCL group, one GPU per rank (a build against "
           "a CUDA libtorch; docs/gpu.md). ppo's control policy trains on the CPU.");
  b.Int("micro_batch_size", &TrainerOptions::micro_batch_size,
        "Language-model RL and DPO learners: the most sequences one forward/backward holds "
        "(whole groups, at least one); the minibatch's loss and gradient are the same, its "
        "memory that of one micro-batch, at the cost of one more forward. 0: one pass.")
      .Min(0);
  b.Section("lora", &TrainerOptions::lora, LoraSection());
  b.Check([](const TrainerOptions& t, config::CheckContext& ctx) { CheckDevice(t.device, ctx); });
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

// The per-role `external` keys, by section (const or not, as `c` is).
template <typename Config>
auto ExternalKeys(Config& c) {
  return std::array{std::pair{std::string("rollout"), &c.rollout.external},
                    std::pair{std::string("reward"), &c.reward.external},
                    std::pair{std::string("echo"), &c.echo.external}};
}

// launch.backend kubernetes puts actors on other hosts: nothing may assume they share this one.
void CheckEveryRoleJoins(const JobConfig& c, config::CheckContext& ctx) {
  const std::string why = "launch.backend is kubernetes: every role joins by address; ";
  for (const auto& [section, external] : ExternalKeys(c)) {
    // A section the algorithm does not read keeps its default in the resolved config.
    if (c.job.algorithm != nullptr && Reads(*c.job.algorithm, section) &&
        ctx.Written(section + ".external") && !*external) {
      ctx.Error(section + ".external", why + "false cannot hold (leave it out: it is implied)");
    }
  }
  if (c.weights.transport == WeightTransport::kShm) {
    ctx.Error("weights.transport",
              why + "shm reaches engines on this host only (use auto, gloo or zmq)");
  }
  const bool control =
      c.job.algorithm != nullptr && c.job.algorithm->family == AlgorithmFamily::kControlPpo;
  if (control && c.sim.backend == "server") {
    ctx.Error("sim.backend",
              why +
                  "server starts simulators beside the controller, where rollout workers on "
                  "other hosts cannot reach them (use inprocess, or external with "
                  "sim.addresses)");
  }
}

// weights.apply: mapped serves the engines' fp32 parameters from a segment on the trainer's host.
void CheckMappedWeights(const JobConfig& c, config::CheckContext& ctx) {
  if (c.weights.apply != "mapped") return;
  if (c.weights.dtype != "float32") {
    ctx.Error("weights.dtype",
              absl::StrCat("weights.apply mapped serves the engines' fp32 parameters from the "
                           "stream's own bytes; got ",
                           c.weights.dtype, " (use float32, or weights.apply in_place)"));
  }
  if (c.engine.device != "cpu") {
    ctx.Error("weights.apply",
              absl::StrCat("mapped makes the shared-memory stream the engines' own parameters, "
                           "which a GPU cannot compute on; engine.device is ",
                           c.engine.device, " (use weights.apply in_place or staged)"));
  }
}

// trainer.lora: what this LoRA implements (docs/lora.md says why each is refused).
void CheckLora(const JobConfig& c, config::CheckContext& ctx) {
  if (c.trainer.lora.rank == 0) return;
  const AlgorithmSpec* a = c.job.algorithm;
  if (a != nullptr && a->family != AlgorithmFamily::kLmRl && a->family != AlgorithmFamily::kDpo &&
      a->family != AlgorithmFamily::kSft) {
    ctx.Error("trainer.lora.rank",
              absl::StrCat("LoRA trains language models; job.algorithm ", a->name, " is not one"));
    return;
  }
  if (c.model.path.empty()) {
    ctx.Error("trainer.lora.rank", "LoRA adapts a pretrained model: set model.path");
  }
  if (c.trainer.ranks != 1) {
    ctx.Error("trainer.ranks", absl::StrCat("LoRA trains on one rank (the adapters are small; "
                                            "the base is frozen), got ",
                                            c.trainer.ranks));
  }
  if (c.trainer.mixed_precision != "none") {
    ctx.Error("trainer.mixed_precision", "LoRA trains in fp32: set mixed_precision: none");
  }
  if (a == nullptr || a->family == AlgorithmFamily::kSft) return;
  if (c.weights.apply != "in_place") {
    ctx.Error("weights.apply", absl::StrCat("LoRA engines merge each adapter version into their "
                                            "weights in place; got ",
                                            c.weights.apply, " (use in_place)"));
  }
  if (IsDeviceWeightTransport(LmWeightTransport(c)) || c.engine.device != "cpu") {
    ctx.Error("engine.device",
              "LoRA weight sync merges adapters into CPU engines; GPU engines load full weights "
              "(set trainer.lora.rank: 0)");
  }
}

// Ranks on GPUs form an NCCL group (dist/nccl_communicator.h), one GPU per rank.
void CheckGpuTrainerRanks(const JobConfig& c, config::CheckContext& ctx) {
  const std::string what = absl::StrCat("trainer.ranks ", c.trainer.ranks, " with trainer.device ",
                                        c.trainer.device, ": ");
  if (!RLFORGE_NCCL) {
    ctx.Error("trainer.device",
              absl::StrCat(what, "ranks on GPUs form an NCCL group, and this build has no NCCL (",
                           RLFORGE_TORCH_CUDA
                               ? "CMake found none beside the CUDA toolkit or the torch wheel"
                               : "it links Debian's CPU-only libtorch",
                           "); set trainer.ranks: 1 or trainer.device: cpu, or build with "
                           "-DRLFORGE_CUDA=ON against the torch wheel (docs/gpu.md)"));
    return;
  }
  const absl::StatusOr<DeviceSpec> d = ParseDevice(c.trainer.device);
  // NCCL refuses two ranks on one GPU; under the local backend every rank is on this host.
  if (d.ok() && d->index >= 0 && !UnderSlurm(c.launch) && !EveryRoleJoins(c.launch)) {
    ctx.Error("trainer.device",
              absl::StrCat(what, "every rank would be on GPU ", d->index,
                           " of this host, and NCCL needs a GPU per rank; set trainer.device: "
                           "cuda (rank r takes GPU r)"));
  }
}

// trainer.ranks and trainer.device against what the algorithm trains and where ranks can run.
void CheckTrainerPlacement(const JobConfig& c, config::CheckContext& ctx) {
  if (c.job.algorithm == nullptr) return;
  if (c.trainer.ranks != 1) {
    const std::string why = OneRankReason(c.job.algorithm->family);
    if (!why.empty()) {
      ctx.Error("trainer.ranks",
                absl::StrCat(c.job.algorithm->name, " ", why, "; got ", c.trainer.ranks));
    }
  }
  if (c.trainer.device != "cpu") {
    const AlgorithmFamily f = c.job.algorithm->family;
    if (f == AlgorithmFamily::kControlPpo || f == AlgorithmFamily::kEcho) {
      ctx.Error("trainer.device",
                absl::StrCat(c.job.algorithm->name,
                             f == AlgorithmFamily::kEcho ? " starts no trainer"
                                                         : " trains its control policy on the CPU",
                             "; got ", c.trainer.device, " (remove it)"));
    } else if (c.trainer.ranks > 1) {
      CheckGpuTrainerRanks(c, ctx);
    }
  }
}

std::shared_ptr<const Schema> BuildJobSchema() {
  SchemaBuilder<JobConfig> b("An rlforge job.");
  b.Section("job", &JobConfig::job, JobSection());
  b.Section("controller", &JobConfig::controller, ControllerSection());
  b.Section("launch", &JobConfig::launch, LaunchSection());
  b.Section("checkpoint", &JobConfig::checkpoint, CheckpointSection());
  b.Section("trainer", &JobConfig::trainer, TrainerSection());
  b.Section("echo", &JobConfig::echo, EchoSection());
  AddControlSections(b);
  AddEngineSection(b);
  AddGrpoSection(b);
  AddRewardSections(b);
  AddDashboardSection(b);
  AddLmSections(b);
  b.Check([](const JobConfig& c, config::CheckContext& ctx) {
    if (!c.controller.keys.empty() && !UsesCurve(c.controller)) {
      ctx.Error("controller.keys",
                "keys are for CURVE, which this job does not use (controller.security " +
                    c.controller.security + " with controller.host " + c.controller.host +
                    "); leave it out, or set controller.security: curve");
    }
    CheckAlgorithmSections(c, ctx);
    CheckLaunchBackend(c, ctx);
    CheckElasticWorkers(c, ctx);
    if (c.job.algorithm != nullptr && c.checkpoint.every > 0) {
      const std::string why = NoCheckpointReason(*c.job.algorithm);
      if (!why.empty()) {
        ctx.Error("checkpoint.every", absl::StrCat("job.algorithm ", c.job.algorithm->name, " ",
                                                   why, "; got ", c.checkpoint.every, " (set 0)"));
      }
      if (c.rollout.max_staleness > 0 && c.job.algorithm->family == AlgorithmFamily::kControlPpo) {
        ctx.Error("checkpoint.every",
                  absl::StrCat("asynchronous runs (rollout.max_staleness ", c.rollout.max_staleness,
                               ") have groups in flight that a checkpoint does not hold; got ",
                               c.checkpoint.every, " (set 0, or rollout.max_staleness: 0)"));
      }
    }
    CheckTrainerPlacement(c, ctx);
    CheckLora(c, ctx);
    const bool lm =
        c.job.algorithm != nullptr && (c.job.algorithm->family == AlgorithmFamily::kLmRl ||
                                       c.job.algorithm->family == AlgorithmFamily::kDpo);
    if (lm) {
      CheckMappedWeights(c, ctx);
    }
    if (lm && c.rollout.workers > kMaxLmEngines) {
      ctx.Error("rollout.workers",
                absl::StrCat("language-model jobs run at most ", kMaxLmEngines,
                             " rollout engines (each holds a copy of the policy and loads every "
                             "version), got ",
                             c.rollout.workers));
    }
    if (c.job.algorithm != nullptr && c.job.algorithm->family == AlgorithmFamily::kEcho &&
        c.echo.workers < 1) {
      ctx.Error("echo.workers", "job.algorithm is echo, which needs at least 1 echo worker");
    }
    if (EveryRoleJoins(c.launch)) CheckEveryRoleJoins(c, ctx);
    int64_t payload = c.echo.payload_bytes * c.echo.tensors;
    if (payload > c.controller.max_message_mb * (int64_t{1} << 20)) {
      ctx.Error("echo.payload_bytes", absl::StrCat("echo.payload_bytes x echo.tensors = ", payload,
                                                   " bytes exceeds controller.max_message_mb"));
    }
  });
  return b.Build();
}

}  // namespace

bool UsesCurve(const ControllerOptions& controller) {
  if (controller.security == "curve") return true;
  if (controller.security == "none") return false;
  return !IsLoopbackHost(controller.host);
}

const config::Schema& JobSchema() {
  static const std::shared_ptr<const Schema> schema = BuildJobSchema();
  return *schema;
}

// Defaults that depend on the algorithm or the launch backend, filled in once they are known, so
// the resolved config states them.
void ApplyDerivedDefaults(JobConfig& c) {
  if (c.job.algorithm == nullptr) return;
  if (EveryRoleJoins(c.launch)) {  // stated in the resolved config that every actor reads
    for (const auto& [section, external] : ExternalKeys(c)) {
      if (Reads(*c.job.algorithm, section)) *external = true;
    }
  }
  if (c.job.algorithm->default_policy_loss.has_value()) {  // the kLmRl algorithms
    if (!c.grpo.policy_loss.has_value()) c.grpo.policy_loss = c.job.algorithm->default_policy_loss;
    const std::string& by_loss = PolicyLossOf(*c.grpo.policy_loss).default_loss_aggregation;
    if (c.grpo.loss_aggregation == "auto") {
      c.grpo.loss_aggregation =
          by_loss.empty() ? c.job.algorithm->default_loss_aggregation : by_loss;
    }
  }
}

// Under Slurm the controller binds every address unless told otherwise: its actors are steps
// on other nodes.
void ApplyBackendDefaults(JobConfig& c) {
  if (UnderSlurm(c.launch) && c.controller.host == ControllerOptions{}.host) {
    c.controller.host = "0.0.0.0";
  }
}

LoadedJob LoadJobFile(const std::string& path, const std::vector<std::string>& overrides,
                      const std::vector<JobCheck>& checks) {
  LoadedJob out;
  std::vector<std::function<void(const void*, config::CheckContext&)>> untyped;
  for (const JobCheck& check : checks) {
    untyped.push_back([check](const void* obj, config::CheckContext& ctx) {
      check(*static_cast<const JobConfig*>(obj), ctx);
    });
  }
  out.errors = config::LoadFileInto(JobSchema(), &out.config, path, overrides, std::move(untyped));
  ApplyDerivedDefaults(out.config);
  ApplyBackendDefaults(out.config);
  if (out.config.job.name.empty()) {
    out.config.job.name = std::filesystem::path(path).stem().string();
  }
  return out;
}

LoadedJob LoadJobText(const std::string& yaml_text, const std::string& origin) {
  LoadedJob out;
  out.errors =
      config::LoadInto(JobSchema(), &out.config, config::LoadInput{yaml_text, origin, {}, {}});
  ApplyDerivedDefaults(out.config);
  ApplyBackendDefaults(out.config);
  return out;
}

std::string ResolvedYaml(const JobConfig& config) {
  YAML::Node tree = config::Dump(JobSchema(), &config);
  for (const config::Field& f : JobSchema().fields) {
    if (f.kind == config::Field::Kind::kSection && Unread(config, f.name)) tree.remove(f.name);
  }
  YAML::Emitter e;
  e << tree;
  return std::string(e.c_str()) + "\n";
}

std::string ConfigReferenceMarkdown() {
  static const JobConfig defaults;
  return config::MarkdownReference(JobSchema(), &defaults);
}

}  // namespace rlforge
