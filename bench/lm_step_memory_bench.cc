// One language-model RL training step at a real model's shape: peak memory and time, with and
// without trainer.micro_batch_size and trainer.lora (docs/lora.md).
//
// model dir -> LoadPolicy (full, or LoRA: base frozen) -> G groups x n samples of random prompt
//   and response tokens -> K steps of MicroBatchedLogprobs + the GRPO clipped loss + AdamW ->
//   peak RSS (VmHWM) after loading and over the steps, seconds per step; with LoRA also the
//   bytes the weight stream carries per version and the engine's merge time (MergedLora).
//
//   build/bench/lm_step_memory_bench --model ~/.cache/rlforge/models/SmolLM2-135M-Instruct
//       [--micro 16] [--lora-rank 8] [--groups 8] [--n 8] [--prompt 60] [--response 32]
//       [--steps 2] [--threads 2]
// Run each setting in its own process: VmHWM is the process's peak. Prints one JSON line.
#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <string>

#include "common/clock.h"
#include "common/status.h"
#include "config/job_config.h"
#include "dist/local_group.h"
#include "models/compute_threads.h"
#include "models/hf_checkpoint.h"
#include "models/lora.h"
#include "nlohmann/json.hpp"
#include "trainer/flat_adamw.h"
#include "trainer/lora_policy.h"
#include "trainer/micro_batch.h"
#include "trainer/policy_loss.h"
#include "trainer/trainer_ranks.h"

namespace rlforge {
namespace {

int64_t PeakRssMb() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    long long kb = 0;
    if (std::sscanf(line.c_str(), "VmHWM: %lld kB", &kb) == 1) return kb / 1024;
  }
  return -1;
}

std::vector<LmGroup> RandomGroups(int64_t groups, int64_t n, int64_t prompt, int64_t response,
                                  int64_t vocab) {
  std::mt19937_64 rng(1);
  std::vector<LmGroup> out(static_cast<size_t>(groups));
  for (int64_t g = 0; g < groups; ++g) {
    out[g].request_id = g;
    for (int64_t t = 0; t < prompt; ++t)
      out[g].prompt.push_back(static_cast<int32_t>(rng() % vocab));
    for (int64_t k = 0; k < n; ++k) {
      LmSample s;
      for (int64_t t = 0; t < response; ++t) {
        s.tokens.push_back(static_cast<int32_t>(rng() % vocab));
        s.logprobs.push_back(-8.0f);
      }
      out[g].samples.push_back(s);
    }
  }
  return out;
}

int Run(const JobConfig& config, int64_t groups, int64_t n, int64_t prompt, int64_t response,
        int steps) {
  nlohmann::json out;
  absl::Status s = dist::RunLocalGroup(1, [&](dist::Communicator& comm) {
    auto options = ShardingOptions(config.trainer, 0, true);
    auto policy = LoadPolicy(config, &comm, *options, {}, "loading");
    if (!policy.ok()) {
      std::fprintf(stderr, "%s\n", std::string(policy.status().message()).c_str());
      return;
    }
    ShardedModel& m = **policy;
    out["load_peak_rss_mb"] = PeakRssMb();
    out["trained_parameters"] = m.shard_data().numel();
    out["weight_stream_bytes"] = m.shard_data().numel() * 4;
    FlatAdamW adam(m.shard_data(), m.shard_grad(), AdamWOptions(config.trainer, 1e-5));
    const int64_t vocab = m.module()->config().vocab_size;
    auto b = PackGroups(RandomGroups(groups, n, prompt, response, vocab));
    auto micro = MicroBatchCount(comm, *b, config.trainer.micro_batch_size);
    out["micro_batches"] = *micro;
    LmPolicyLossOptions lo;
    const auto loss_fn = CreatePolicyLoss(PolicyLossKind::kPpoClip, lo);
    m.module()->train();
    double seconds = 0;
    for (int step = 0; step < steps; ++step) {
      const Stopwatch t;
      m.ZeroGrad();
      auto pass =
          MicroBatchedLogprobs(m, *b, *micro, true, true,
                               [&](const torch::Tensor& logp) -> absl::StatusOr<torch::Tensor> {
                                 LmPolicyLossInput in;
                                 in.logp = logp;
                                 in.old_logp = b->old_logp;
                                 in.mask = b->mask;
                                 in.advantages = torch::linspace(-1, 1, b->mask.size(0));
                                 ASSIGN_OR_RETURN(LmPolicyLoss l, loss_fn->Compute(in));
                                 return l.loss;
                               });
      if (!pass.ok()) {
        std::fprintf(stderr, "%s\n", std::string(pass.status().message()).c_str());
        return;
      }
      adam.Step();
      if (step > 0 || steps == 1) seconds += t.Seconds();
    }
    out["step_s"] = seconds / std::max(1, steps - 1);
    out["step_peak_rss_mb"] = PeakRssMb();
    if (config.trainer.lora.rank > 0) {  // the engine's side of a sync: merge one version
      auto engine = models::LoadHfModel(config.model.path);
      auto merged = models::MergedLora::Create(*engine, models::LoraSpecOf(config.trainer.lora));
      const Stopwatch t;
      (*merged)->Merge();
      out["engine_merge_s"] = t.Seconds();
    }
  });
  if (!s.ok() || out.empty()) return 1;
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace
}  // namespace rlforge

int main(int argc, char** argv) {
  rlforge::JobConfig config;
  int64_t groups = 8, n = 8, prompt = 60, response = 32, threads = 2;
  int steps = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model")
      config.model.path = v;
    else if (k == "--micro")
      config.trainer.micro_batch_size = std::stoll(v);
    else if (k == "--lora-rank")
      config.trainer.lora.rank = std::stoll(v);
    else if (k == "--groups")
      groups = std::stoll(v);
    else if (k == "--n")
      n = std::stoll(v);
    else if (k == "--prompt")
      prompt = std::stoll(v);
    else if (k == "--response")
      response = std::stoll(v);
    else if (k == "--steps")
      steps = std::stoi(v);
    else if (k == "--threads")
      threads = std::stoll(v);
    else {
      std::fprintf(stderr, "lm_step_memory_bench: unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  if (config.model.path.empty()) {
    std::fprintf(stderr,
                 "usage: lm_step_memory_bench --model DIR [--micro N] [--lora-rank R] ...\n");
    return 2;
  }
  rlforge::SetComputeThreads(threads, 1);
  return rlforge::Run(config, groups, n, prompt, response, steps);
}
