// Env steps/s through sim_bridge against the same envs stepped in-process.
//
// For each env: 64 envs in-process vs 64 envs in one `rlforge sim-server`
// process, and 128 in-process vs 2 servers x 64 (which step in parallel),
// each over ZeroMQ on a Unix socket (ipc://) and over shared memory (shm://). "+policy" rows add
// what a rollout worker does per step: one batched forward of the 64x64 MLP actor-critic, pipelined
// over servers as the worker does it (see Measure). Rounds are interleaved so machine noise hits
// every variant alike. With --pin auto (the default, as sim.cpu_affinity: auto in a job) this
// process and the servers are placed as a job places a worker and its servers.
//
//   build/bench/sim_bridge_bench [--steps 2000] [--rounds 3] [--rlforge build/rlforge]
//                                [--env CartPole-v1] [--via shm]   (one env / transport only)
//                                [--pin auto|none]
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/cpu_affinity.h"
#include "common/status.h"
#include "launch/process_launcher.h"
#include "models/actor_critic.h"
#include "models/compute_threads.h"
#include "sim_bridge/remote_vector_env.h"
#include "sim_bridge/vector_env.h"

namespace {

using rlforge::sim::VectorEnv;

// Steps `env` `steps` times with random actions; returns env steps/s. With a
// policy, pipelined, it runs the rollout worker's loop with sim.pipeline on
// (rollout/control_rollout_role.cc): group by group, the batched forward for
// one group overlaps the others' steps (one group in-process, one per server
// remotely); not pipelined, one forward over every env, then one Step.
double Measure(VectorEnv& env, int steps, rlforge::ActorCritic* policy, bool pipelined = true) {
  std::vector<float> obs;
  std::vector<int64_t> seeds(env.num_envs());
  for (int i = 0; i < env.num_envs(); ++i) seeds[i] = i;
  if (!env.Reset(seeds, &obs).ok()) std::abort();
  const auto& spec = env.spec();
  const int n = env.num_envs();
  const int64_t osz = spec.observation.flat_size(), asz = spec.action.flat_size();
  std::mt19937_64 rng(1);
  std::vector<int64_t> da(n);
  std::vector<float> ca(n * asz);
  auto draw = [&](int first, int count) {
    for (int i = first; i < first + count; ++i) {
      da[i] = static_cast<int64_t>(rng() % std::max<int64_t>(spec.action.n, 1));
      for (int64_t k = 0; k < asz; ++k) ca[i * asz + k] = (rng() % 2000) / 1000.0f - 1.0f;
    }
  };
  auto actions = [&](int first) {
    return spec.action.is_discrete() ? static_cast<const void*>(da.data() + first)
                                     : static_cast<const void*>(ca.data() + first * asz);
  };
  rlforge::sim::StepOutput out;
  torch::InferenceMode guard;
  const rlforge::Stopwatch timer;
  if (policy == nullptr || !pipelined) {
    for (int t = 0; t < steps; ++t) {
      if (policy != nullptr) {
        auto r = (*policy)->Forward(torch::from_blob(obs.data(), {n, osz}));
        (void)r.value.data_ptr<float>();
      }
      draw(0, n);
      if (!env.Step(actions(0), &out).ok()) std::abort();
      obs = out.obs;
    }
  } else {
    const int groups = env.num_groups();
    for (int t = 0; t < steps; ++t) {
      for (int g = 0; g < groups; ++g) {
        const int off = env.group_offset(g), m = env.group_size(g);
        if (t > 0) {
          if (!env.EndStep(g, &out).ok()) std::abort();
          std::copy(out.obs.begin(), out.obs.end(), obs.begin() + off * osz);
        }
        auto r = (*policy)->Forward(torch::from_blob(obs.data() + off * osz, {m, osz}));
        (void)r.value.data_ptr<float>();
        draw(off, m);
        if (!env.BeginStep(g, actions(off)).ok()) std::abort();
      }
    }
    for (int g = 0; g < groups; ++g) {
      if (!env.EndStep(g, &out).ok()) std::abort();
    }
  }
  const double s = timer.Seconds();
  return static_cast<double>(steps) * n / s;
}

}  // namespace

constexpr char kUsage[] =
    "usage: sim_bridge_bench [--steps 2000] [--rounds 3] [--rlforge build/rlforge]\n"
    "                        [--env CartPole-v1|Acrobot-v1|Pendulum-v1] [--via ipc|shm]\n"
    "                        [--pin auto|none]\n";

int main(int argc, char** argv) {
  int steps = 2000, rounds = 3;
  std::string bin = "build/rlforge", only_env, only_via, pin = "auto";
  for (int i = 1; i < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--help" || k == "-h") {
      std::printf("%s", kUsage);
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s needs a value\n%s", k.c_str(), kUsage);
      return 2;
    }
    if (k == "--steps")
      steps = std::atoi(argv[i + 1]);
    else if (k == "--rounds")
      rounds = std::atoi(argv[i + 1]);
    else if (k == "--rlforge")
      bin = argv[i + 1];
    else if (k == "--env")
      only_env = argv[i + 1];
    else if (k == "--via")
      only_via = argv[i + 1];
    else if (k == "--pin")
      pin = argv[i + 1];
    else {
      std::fprintf(stderr, "unknown option %s\n%s", k.c_str(), kUsage);
      return 2;
    }
  }
  if ((pin != "auto" && pin != "none") || steps < 1 || rounds < 1) {
    std::fprintf(stderr, "bad --pin, --steps or --rounds\n%s", kUsage);
    return 2;
  }
  // As a job with sim.cpu_affinity: auto places one worker with one or two servers.
  rlforge::SimPlacement one_server, two_servers;
  if (pin == "auto") {
    auto allowed = rlforge::AllowedCpus();
    if (!allowed.ok()) return 2;
    one_server = rlforge::PlanSimPlacement(*allowed, 1, 1);
    two_servers = rlforge::PlanSimPlacement(*allowed, 1, 2);
    if (two_servers.pinned && !rlforge::PinProcess(two_servers.worker_cpus[0]).ok()) return 2;
    std::printf("placement: 1 server: %s; 2 servers: %s\n", one_server.why.c_str(),
                two_servers.why.c_str());
  } else {
    std::printf("placement: not pinned (--pin none)\n");
  }
  rlforge::SetComputeThreads(1);  // as a rollout worker: one torch and one BLAS thread
  setvbuf(stdout, nullptr, _IOLBF, 0);
  std::printf(
      "env steps/s (median of %d interleaved rounds of %d steps), 64 envs per server; "
      "overheads: median over rounds of 1 - remote/in-process in the same round\n",
      rounds, steps);
  std::printf("%-12s %-8s %-4s %10s %10s %10s %10s %10s %7s %7s %7s\n", "env", "policy", "via",
              "inproc-64", "1 server", "inproc-128", "2 servers", "2 piped", "ovh-1", "ovh-2",
              "ovh-2p");
  std::vector<std::string> vias;
  for (const std::string via : {"ipc", "shm"}) {
    if (only_via.empty() || only_via == via) vias.push_back(via);
  }
  for (const std::string id : {"CartPole-v1", "Acrobot-v1", "Pendulum-v1"}) {
    if (!only_env.empty() && only_env != id) continue;
    rlforge::LocalProcessLauncher launcher;
    zmq::context_t ctx;
    // Per transport: one server for the 1-server case, two for the 2-server
    // case (an shm server takes one client).
    std::map<std::string, std::unique_ptr<VectorEnv>> one, two;
    for (const std::string& via : vias) {
      std::vector<rlforge::sim::SimServerAddress> addrs;
      for (int k = 0; k < 3; ++k) {
        std::string tag = std::to_string(getpid()) + "-" + id + "-" + via + std::to_string(k);
        std::string ep = via == "shm" ? "shm://rlforge-bench-" + tag
                                      : "ipc:///tmp/rlforge-bench-" + tag + ".sock";
        // Server 0 serves the 1-server case, servers 1 and 2 the 2-server case.
        const rlforge::SimPlacement& plan = k == 0 ? one_server : two_servers;
        rlforge::ProcessSpec spec{
            "sim",
            {bin, "sim-server", "--env", id, "--num-envs", "64", "--bind", ep},
            "/tmp/rlforge-bench-sim.log",
            {},
            {}};
        if (plan.pinned) {
          spec.cpus = plan.server_cpus[k == 0 ? 0 : k - 1];
          spec.argv.insert(spec.argv.end(), {"--spin-us", "2000"});  // as the controller does
        }
        auto pid = launcher.Start(spec);
        if (!pid.ok()) {
          std::fprintf(stderr, "cannot start %s: %s\n", bin.c_str(),
                       rlforge::Msg(pid.status()).c_str());
          return 2;
        }
        addrs.push_back({"sim-" + std::to_string(k), ep});
      }
      one[via] = rlforge::sim::RemoteVectorEnv::Connect(ctx, {addrs[0]}, {}).value();
      two[via] = rlforge::sim::RemoteVectorEnv::Connect(ctx, {addrs[1], addrs[2]}, {}).value();
    }
    auto local64 = rlforge::sim::LocalVectorEnv::Create(id, 64).value();
    auto local128 = rlforge::sim::LocalVectorEnv::Create(id, 128).value();
    rlforge::ActorCriticOptions po;
    po.obs_size = local64->spec().observation.flat_size();
    po.discrete = local64->spec().action.is_discrete();
    po.action_size = po.discrete ? local64->spec().action.n : local64->spec().action.flat_size();
    rlforge::ActorCritic policy(po);
    for (bool with_policy : {false, true}) {
      rlforge::ActorCritic* p = with_policy ? &policy : nullptr;
      // Per round, each variant's steps/s; an overhead is the median over rounds of
      // 1 - remote/in-process within the same round, so a slow spell of the machine
      // falls on both sides of a ratio (a best-of-rounds on each side would pair a
      // lucky round of one with an unlucky round of the other).
      std::map<std::string, std::vector<double>> runs;
      for (int r = 0; r < rounds; ++r) {
        runs["l64"].push_back(Measure(*local64, steps, p));
        runs["l128"].push_back(Measure(*local128, steps, p));
        for (const std::string& via : vias) {
          runs["r1" + via].push_back(Measure(*one[via], steps, p));
          runs["r2" + via].push_back(Measure(*two[via], steps, p, /*pipelined=*/false));
          if (p != nullptr) {
            runs["r2p" + via].push_back(Measure(*two[via], steps, p, /*pipelined=*/true));
          }
        }
      }
      auto median = [](std::vector<double> v) {
        if (v.empty()) return 0.0;
        std::sort(v.begin(), v.end());
        return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
      };
      auto overhead = [&](const std::string& remote, const std::string& local) {
        const auto& a = runs[remote];
        const auto& b = runs[local];
        std::vector<double> o;
        for (size_t i = 0; i < a.size(); ++i) o.push_back(100 * (1 - a[i] / b[i]));
        return median(o);
      };
      for (const std::string& via : vias) {
        std::printf("%-12s %-8s %-4s %10.0f %10.0f %10.0f %10.0f %10.0f %6.1f%% %6.1f%% %6.1f%%\n",
                    id.c_str(), with_policy ? "+policy" : "none", via.c_str(), median(runs["l64"]),
                    median(runs["r1" + via]), median(runs["l128"]), median(runs["r2" + via]),
                    median(runs["r2p" + via]), overhead("r1" + via, "l64"),
                    overhead("r2" + via, "l128"),
                    with_policy ? overhead("r2p" + via, "l128") : 0.0);
      }
    }
  }
  return 0;
}
