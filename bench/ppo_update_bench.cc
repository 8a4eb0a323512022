// One PPO update on CartPole-sized networks: the fused, autograd-free loss and
// gradient (trainer/fast_ppo_grad.h) against libtorch autograd, same batch,
// same learner, interleaved rounds; reports ms per update and the ratio.
//
//   build/bench/ppo_update_bench [--rounds 5] [--updates 20] [--fused-only 1]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "models/compute_threads.h"
#include "trainer/ppo_learner.h"

namespace {

struct Shape {
  const char* name;
  int64_t obs, actions;
  bool discrete;
  int64_t batch, minibatches, epochs;
};

double TimeUpdates(rlforge::PpoLearner& l, const rlforge::PpoBatch& b, int updates) {
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < updates; ++i) l.Update(b, 1 + i, 1000);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
         updates;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 5, updates = 20;
  bool fused_only = false;  // for profiling the fused path alone
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--rounds") rounds = std::atoi(argv[i + 1]);
    if (k == "--updates") updates = std::atoi(argv[i + 1]);
    if (k == "--fused-only") fused_only = std::string(argv[i + 1]) == "1";
  }
  rlforge::SetComputeThreads(1);  // torch's and OpenBLAS's pools, as trainer.threads: 1
  std::printf("ms per PPO update (64x64 tanh actor and critic), best of %d rounds x %d updates\n",
              rounds, updates);
  std::printf("%-34s %10s %10s %8s\n", "case", "autograd", "fused", "ratio");
  for (const Shape& s : {Shape{"CartPole 256 x 20 epochs, 1 mb", 4, 2, true, 256, 1, 20},
                         Shape{"CartPole 2048 x 10 epochs, 32 mb", 4, 2, true, 2048, 32, 10},
                         Shape{"Pendulum 1024 x 10 epochs, 16 mb", 3, 1, false, 1024, 16, 10}}) {
    rlforge::proto::PolicySpec spec;
    spec.set_obs_size(s.obs);
    spec.set_discrete(s.discrete);
    spec.set_action_size(s.actions);
    rlforge::JobConfig c;
    c.job.algorithm = rlforge::FindAlgorithm("ppo");
    c.ppo.epochs = s.epochs;
    c.ppo.minibatches = s.minibatches;
    c.trainer.max_grad_norm = 0.5;
    rlforge::JobConfig slow = c;
    slow.ppo.fused_update = false;
    rlforge::PpoLearner fused(c, spec), autograd(slow, spec);
    if (!fused.fused() || autograd.fused()) {
      std::fprintf(stderr, "the learners did not take the paths asked for\n");
      return 1;
    }
    torch::manual_seed(3);
    rlforge::PpoBatch b;
    b.obs = torch::randn({s.batch, s.obs});
    b.actions = s.discrete ? torch::randint(0, s.actions, {s.batch}, torch::kLong)
                           : torch::randn({s.batch, s.actions});
    b.logprobs = torch::randn({s.batch}) * 0.1 - 0.7;
    b.values = torch::randn({s.batch});
    b.advantages = torch::randn({s.batch});
    b.returns = torch::randn({s.batch});
    double best_a = 1e30, best_f = 1e30;
    for (int r = 0; r < rounds; ++r) {
      if (!fused_only) best_a = std::min(best_a, TimeUpdates(autograd, b, updates));
      best_f = std::min(best_f, TimeUpdates(fused, b, updates));
    }
    std::printf("%-34s %10.3f %10.3f %7.2fx\n", s.name, best_a, best_f, best_a / best_f);
  }
  return 0;
}
