// Env steps/s through sim_bridge against the same envs stepped in-process.
//
// For each env: 64 envs in-process vs 64 envs in one `rlforge sim-server`
// process (ipc socket), and 128 in-process vs 2 servers x 64 (which step in
// parallel). "+policy" rows add what a rollout worker does per step: one
// batched forward of the 64x64 MLP actor-critic over all envs. Rounds are
// interleaved so machine noise hits every variant alike.
//
//   build/bench/sim_bridge_bench [--steps 2000] [--rounds 3] [--rlforge build/rlforge]
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/status.h"
#include "launch/process_launcher.h"
#include "models/actor_critic.h"
#include "sim_bridge/remote_vector_env.h"
#include "sim_bridge/vector_env.h"

namespace {

using rlforge::sim::VectorEnv;

// Steps `env` `steps` times (random actions, optional policy forward); returns env steps/s.
double Measure(VectorEnv& env, int steps, rlforge::ActorCritic* policy) {
  std::vector<float> obs;
  std::vector<int64_t> seeds(env.num_envs());
  for (int i = 0; i < env.num_envs(); ++i) seeds[i] = i;
  if (!env.Reset(seeds, &obs).ok()) std::abort();
  const auto& spec = env.spec();
  int n = env.num_envs();
  std::mt19937_64 rng(1);
  std::vector<int64_t> da(n);
  std::vector<float> ca(n * spec.action.flat_size());
  rlforge::sim::StepOutput out;
  torch::InferenceMode guard;
  auto t0 = std::chrono::steady_clock::now();
  for (int t = 0; t < steps; ++t) {
    if (policy != nullptr) {
      auto o = torch::from_blob(out.obs.empty() ? obs.data() : out.obs.data(),
                                {n, spec.observation.flat_size()}, torch::kFloat32);
      auto r = (*policy)->Forward(o);
      (void)r.value.data_ptr<float>();
    }
    for (auto& a : da) a = static_cast<int64_t>(rng() % std::max<int64_t>(spec.action.n, 1));
    for (auto& a : ca) a = static_cast<float>((rng() % 2000) / 1000.0 - 1.0);
    const void* act = spec.action.is_discrete() ? static_cast<const void*>(da.data())
                                                : static_cast<const void*>(ca.data());
    if (!env.Step(act, &out).ok()) std::abort();
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(steps) * n / s;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 2000, rounds = 3;
  std::string bin = "build/rlforge";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--steps")
      steps = std::atoi(argv[i + 1]);
    else if (k == "--rounds")
      rounds = std::atoi(argv[i + 1]);
    else if (k == "--rlforge")
      bin = argv[i + 1];
  }
  torch::set_num_threads(1);
  std::printf("env steps/s, 64 envs per server, %d steps x %d interleaved rounds\n", steps, rounds);
  std::printf("%-13s %-8s %12s %12s %12s %12s %9s %9s\n", "env", "policy", "inproc-64", "1 server",
              "inproc-128", "2 servers", "ovh-1", "ovh-2");
  for (const std::string id : {"CartPole-v1", "Acrobot-v1", "Pendulum-v1"}) {
    rlforge::LocalProcessLauncher launcher;
    std::vector<rlforge::sim::SimServerAddress> addrs;
    for (int k = 0; k < 2; ++k) {
      std::string ep = "ipc:///tmp/rlforge-bench-" + std::to_string(getpid()) + "-" +
                       std::to_string(k) + ".sock";
      auto pid = launcher.Start({"sim",
                                 {bin, "sim-server", "--env", id, "--num-envs", "64", "--bind", ep},
                                 "/tmp/rlforge-bench-sim.log",
                                 {}});
      if (!pid.ok()) {
        std::fprintf(stderr, "cannot start %s: %s\n", bin.c_str(),
                     rlforge::Msg(pid.status()).c_str());
        return 2;
      }
      addrs.push_back({"sim-" + std::to_string(k), ep});
    }
    zmq::context_t ctx;
    auto one = rlforge::sim::RemoteVectorEnv::Connect(ctx, {addrs[0]}, {}).value();
    auto two = rlforge::sim::RemoteVectorEnv::Connect(ctx, addrs, {}).value();
    auto local64 = rlforge::sim::LocalVectorEnv::Create(id, 64).value();
    auto local128 = rlforge::sim::LocalVectorEnv::Create(id, 128).value();
    rlforge::ActorCriticOptions po;
    po.obs_size = local64->spec().observation.flat_size();
    po.discrete = local64->spec().action.is_discrete();
    po.action_size = po.discrete ? local64->spec().action.n : local64->spec().action.flat_size();
    rlforge::ActorCritic policy(po);
    for (bool with_policy : {false, true}) {
      rlforge::ActorCritic* p = with_policy ? &policy : nullptr;
      std::map<std::string, double> best;
      for (int r = 0; r < rounds; ++r) {
        auto keep = [&](const char* k, double v) { best[k] = std::max(best[k], v); };
        keep("l64", Measure(*local64, steps, p));
        keep("r1", Measure(*one, steps, p));
        keep("l128", Measure(*local128, steps, p));
        keep("r2", Measure(*two, steps, p));
      }
      std::printf("%-13s %-8s %12.0f %12.0f %12.0f %12.0f %8.1f%% %8.1f%%\n", id.c_str(),
                  with_policy ? "+policy" : "none", best["l64"], best["r1"], best["l128"],
                  best["r2"], 100 * (1 - best["r1"] / best["l64"]),
                  100 * (1 - best["r2"] / best["l128"]));
    }
  }
  return 0;
}
