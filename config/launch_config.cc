#include "config/launch_config.h"

#include <array>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/host_address.h"

namespace rlforge {

namespace {

using config::Schema;
using config::SchemaBuilder;

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

// The per-role `external` keys, by section (const or not, as `c` is).
template <typename Config>
auto ExternalKeys(Config& c) {
  return std::array{std::pair{std::string("rollout"), &c.rollout.external},
                    std::pair{std::string("reward"), &c.reward.external},
                    std::pair{std::string("echo"), &c.echo.external}};
}

// Every role's placement, by name.
std::array<std::pair<const char*, const RolePlacementOptions*>, 3> Placements(
    const LaunchOptions& l) {
  return {{{"trainer", &l.placement.trainer},
           {"rollout", &l.placement.rollout},
           {"reward", &l.placement.reward}}};
}

// launch.backend kubernetes: `rlforge k8s` turns gpus into the pods' GPU requests; the rest of
// the placement is the Kubernetes scheduler's.
void CheckKubernetesPlacement(const JobConfig& c, config::CheckContext& ctx) {
  const char* why =
      "launch.backend kubernetes leaves node choice to the Kubernetes scheduler (of the "
      "placement keys only gpus applies there: each pod's nvidia.com/gpu request)";
  if (c.launch.nodes != 0) ctx.Error("launch.nodes", why);
  for (const auto& [role, rp] : Placements(c.launch)) {
    if (!rp->nodes.empty()) ctx.Error(absl::StrCat("launch.placement.", role, ".nodes"), why);
    if (rp->per_node != 0) ctx.Error(absl::StrCat("launch.placement.", role, ".per_node"), why);
  }
}

// launch.backend local: every actor on this host, nothing to place.
void CheckLocalPlacement(const JobConfig& c, config::CheckContext& ctx) {
  const char* why =
      "only launch.backend slurm places actors on nodes (local runs every actor on this "
      "host); remove it or set launch.backend: slurm";
  if (c.launch.nodes != 0) ctx.Error("launch.nodes", why);
  for (const auto& [role, rp] : Placements(c.launch)) {
    if (!(*rp == RolePlacementOptions{})) ctx.Error(absl::StrCat("launch.placement.", role), why);
  }
}

// launch.backend slurm: actors are steps on other nodes.
void CheckSlurm(const JobConfig& c, config::CheckContext& ctx) {
  const auto placements = Placements(c.launch);
  const bool external[] = {false, c.rollout.external, c.reward.external};
  for (size_t i = 0; i < placements.size(); ++i) {
    const auto& [role, rp] = placements[i];
    if (external[i] && !(*rp == RolePlacementOptions{})) {
      ctx.Error(absl::StrCat("launch.placement.", role),
                absl::StrCat(role,
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
  if (c.sim.backend == SimBackend::kServer) {
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

// launch.backend kubernetes puts actors on other hosts: nothing may assume they share this one.
void CheckEveryRoleJoins(const JobConfig& c, config::CheckContext& ctx) {
  const std::string why = "launch.backend is kubernetes: every role joins by address; ";
  for (const auto& [section, external] : ExternalKeys(c)) {
    // A section the algorithm does not read keeps its default in the resolved config.
    if (c.job.algorithm != nullptr && c.job.algorithm->Reads(section) &&
        ctx.Written(section + ".external") && !*external) {
      ctx.Error(section + ".external", why + "false cannot hold (leave it out: it is implied)");
    }
  }
  if (c.weights.transport == WeightTransport::kShm) {
    ctx.Error("weights.transport",
              why + "shm reaches engines on this host only (use auto, gloo or zmq)");
  }
  const bool sims = c.job.algorithm != nullptr && c.job.algorithm->Reads("sim");
  if (sims && c.sim.backend == SimBackend::kServer) {
    ctx.Error("sim.backend",
              why +
                  "server starts simulators beside the controller, where rollout workers on "
                  "other hosts cannot reach them (use inprocess, or external with "
                  "sim.addresses)");
  }
}

}  // namespace

std::shared_ptr<const Schema> LaunchSection() {
  SchemaBuilder<LaunchOptions> b("How actor processes are started.");
  b.Enum("backend", &LaunchOptions::backend,
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

void CheckLaunch(const JobConfig& c, config::CheckContext& ctx) {
  switch (c.launch.backend) {
    case LaunchBackend::kKubernetes:
      CheckKubernetesPlacement(c, ctx);
      CheckEveryRoleJoins(c, ctx);
      return;
    case LaunchBackend::kLocal:
      CheckLocalPlacement(c, ctx);
      return;
    case LaunchBackend::kSlurm:
      CheckSlurm(c, ctx);
      return;
  }
}

void ApplyLaunchDefaults(JobConfig& c) {
  if (c.job.algorithm != nullptr && EveryRoleJoins(c.launch)) {
    for (const auto& [section, external] : ExternalKeys(c)) {
      if (c.job.algorithm->Reads(section)) *external = true;
    }
  }
  if (UnderSlurm(c.launch) && c.controller.host == ControllerOptions{}.host) {
    c.controller.host = "0.0.0.0";
  }
}

}  // namespace rlforge
