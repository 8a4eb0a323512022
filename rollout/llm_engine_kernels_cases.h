// The engine through the kernel library (EngineSettings::use_kernel_library) against the CPU
// engine's own path, on the same model, seeds and requests: the same tokens, the same
// logprobs within a tolerance, the same scheduling. Included by exactly one test file per
// binary, which instantiates the suite for its device: llm_engine_kernels_test.cc on the CPU
// (the kernels' references), llm_engine_kernels_gpu_test.cc on CUDA (the kernels themselves;
// skipped, saying why, where this build or machine cannot run them).
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <random>
#include <vector>

#include "rollout/kernel_ops.h"
#include "rollout/llm_engine.h"

namespace rlforge {
namespace {

using models::Transformer;
using models::TransformerConfig;

TransformerConfig KernelCaseConfig(int64_t heads, int64_t kv_heads, int64_t head_dim) {
  TransformerConfig c;
  c.architecture = "Qwen2ForCausalLM";  // q/k/v biases too
  c.attention_bias = true;
  c.vocab_size = 67;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.head_dim = head_dim;
  c.max_position_embeddings = 256;
  return c;
}

// Larger weights than the default init: a peaked next-token distribution, so rounding-level
// differences between the two paths cannot move a draw across a boundary.
Transformer KernelCaseModel(const TransformerConfig& c, uint64_t seed) {
  torch::manual_seed(seed);
  Transformer m(c);
  torch::NoGradGuard g;
  for (auto& p : m->parameters()) p.mul_(3.0);
  m->eval();
  return m;
}

std::vector<GenerationRequest> KernelCaseRequests(uint64_t seed, int count, int64_t n,
                                                  int64_t max_prompt, int64_t max_tokens) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> tok(1, 66), len(1, static_cast<int>(max_prompt));
  std::vector<GenerationRequest> out;
  for (int i = 0; i < count; ++i) {
    GenerationRequest r;
    r.id = i;
    r.prompt.resize(len(rng));
    for (auto& t : r.prompt) t = tok(rng);
    r.n = n;
    r.params.seed = seed * 100 + i;
    r.params.max_tokens = max_tokens;
    r.params.temperature = i % 3 == 0 ? 0.0 : 0.9;  // greedy and sampled groups
    r.params.top_p = i % 3 == 2 ? 0.9 : 1.0;
    r.params.top_k = i % 3 == 1 ? 20 : 0;
    r.params.stop_token_ids = {0};
    out.push_back(r);
  }
  return out;
}

struct KernelCaseRun {
  std::map<uint64_t, FinishedGroup> done;
  EngineStats stats;
};

// Submits every request at once, then steps to the end.
KernelCaseRun RunKernelCase(Transformer model, const EngineSettings& settings,
                            const std::vector<GenerationRequest>& requests) {
  LlmEngine engine(std::move(model), settings, 0);
  for (const auto& r : requests) EXPECT_TRUE(engine.Submit(r).ok());
  KernelCaseRun run;
  for (int step = 0; step < 5000 && engine.HasUnfinished(); ++step) {
    const absl::Status s = engine.Step();
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) break;
    for (auto& g : engine.TakeFinished()) run.done[g.request_id] = std::move(g);
  }
  EXPECT_FALSE(engine.HasUnfinished());
  EXPECT_EQ(engine.blocks().num_used(), 0);
  run.stats = engine.stats();
  return run;
}

class EngineKernelLibraryTest : public ::testing::TestWithParam<torch::DeviceType> {
 protected:
  void SetUp() override {
    if (GetParam() == torch::kCUDA) {
      if (const std::string why = kernel_ops::CudaUnavailableReason(); !why.empty()) {
        GTEST_SKIP() << why;
      }
    }
  }

  // Runs `requests` through the CPU engine's own path and through the kernel library on this
  // suite's device, and expects the same groups: tokens, finish reasons, versions equal;
  // logprobs within the device's tolerance. Returns the two runs' stats.
  std::pair<EngineStats, EngineStats> ExpectSameGenerations(
      const TransformerConfig& config, uint64_t seed, EngineSettings settings,
      const std::vector<GenerationRequest>& requests) {
    settings.use_kernel_library = false;
    const KernelCaseRun want = RunKernelCase(KernelCaseModel(config, seed), settings, requests);
    settings.use_kernel_library = true;
    Transformer model = KernelCaseModel(config, seed);
    model->to(torch::Device(GetParam()));
    const KernelCaseRun got = RunKernelCase(model, settings, requests);
    // CPU: the references sum in double where the engine sums in float; CUDA: fp32 kernels
    // and cuBLAS in another order.
    const double tolerance = GetParam() == torch::kCPU ? 2e-5 : 1e-3;
    EXPECT_EQ(got.done.size(), requests.size());
    double max_diff = 0;
    for (const auto& [id, w] : want.done) {
      auto it = got.done.find(id);
      if (it == got.done.end()) {
        ADD_FAILURE() << "request " << id << " did not finish through the kernel library";
        continue;
      }
      const FinishedGroup& g = it->second;
      EXPECT_EQ(g.samples.size(), w.samples.size());
      for (size_t j = 0; j < std::min(g.samples.size(), w.samples.size()); ++j) {
        const GeneratedSample &a = g.samples[j], &b = w.samples[j];
        EXPECT_EQ(a.tokens, b.tokens) << "request " << id << " sample " << j;
        EXPECT_EQ(a.finish_reason, b.finish_reason) << "request " << id << " sample " << j;
        EXPECT_EQ(a.versions, b.versions);
        if (a.logprobs.size() != b.logprobs.size()) continue;
        for (size_t t = 0; t < a.logprobs.size(); ++t) {
          max_diff = std::max(max_diff, double{std::abs(a.logprobs[t] - b.logprobs[t])});
        }
      }
    }
    EXPECT_LT(max_diff, tolerance);
    // The same scheduling, step for step: what the two paths computed differs only in rounding.
    const EngineStats &a = got.stats, &b = want.stats;
    EXPECT_EQ(a.steps, b.steps);
    EXPECT_EQ(a.generated_tokens, b.generated_tokens);
    EXPECT_EQ(a.prefill_tokens, b.prefill_tokens);
    EXPECT_EQ(a.preemptions, b.preemptions);
    EXPECT_EQ(a.peak_blocks, b.peak_blocks);
    EXPECT_EQ(a.prompt_kv_slots, b.prompt_kv_slots);
    return {want.stats, got.stats};
  }
};

// GRPO-shaped groups: prompts prefilled once and shared by their 8 samples (prompts shorter
// than a block and ending mid-block), chunked prefill (7 tokens a step), greedy and sampled.
TEST_P(EngineKernelLibraryTest, SharedPromptsAndChunkedPrefillGenerateTheSame) {
  EngineSettings s;
  s.num_blocks = 256, s.block_size = 5, s.max_batch = 64, s.max_tokens_per_step = 7;
  const std::vector<GenerationRequest> requests = KernelCaseRequests(1, 6, 8, 13, 12);
  const EngineStats shared =
      ExpectSameGenerations(KernelCaseConfig(4, 2, 8), 1, s, requests).second;
  s.prefix_sharing = false;
  const EngineStats unshared =
      ExpectSameGenerations(KernelCaseConfig(4, 2, 8), 1, s, requests).second;
  // Shared: each prompt's KV written once for its 8 samples.
  EXPECT_EQ(shared.prompt_kv_slots * 8, unshared.prompt_kv_slots);
}

// A pool too small for the batch: the newest sequences are preempted and recomputed.
TEST_P(EngineKernelLibraryTest, PreemptionByRecomputeGeneratesTheSame) {
  EngineSettings s;
  s.num_blocks = 24, s.block_size = 4, s.max_batch = 32, s.max_tokens_per_step = 32;
  const EngineStats got =
      ExpectSameGenerations(KernelCaseConfig(4, 2, 8), 2, s, KernelCaseRequests(2, 10, 3, 14, 16))
          .second;
  EXPECT_GT(got.preemptions, 0) << "the pool was meant to force preemption";
}

// GQA ratios 1, 4 and 8 with head dims 16 and 64, block sizes that contexts end inside of.
TEST_P(EngineKernelLibraryTest, GqaRatiosAndBlockSizesGenerateTheSame) {
  struct Shape {
    int64_t heads, kv_heads, head_dim, block_size;
  };
  for (Shape sh : {Shape{2, 2, 16, 3}, {4, 1, 16, 16}, {8, 1, 64, 7}}) {
    SCOPED_TRACE(testing::Message() << sh.heads << " heads, " << sh.kv_heads << " kv heads, dim "
                                    << sh.head_dim << ", block " << sh.block_size);
    EngineSettings s;
    s.num_blocks = 128, s.block_size = sh.block_size, s.max_batch = 32;
    ExpectSameGenerations(KernelCaseConfig(sh.heads, sh.kv_heads, sh.head_dim), 3, s,
                          KernelCaseRequests(3, 4, 3, 20, 10));
  }
}

// The logprobs of `tokens` after `prompt` under a dense forward of the whole sequence (the
// trainer's), on the CPU.
std::vector<float> DenseLogprobs(Transformer& m, const std::vector<int32_t>& prompt,
                                 const std::vector<int32_t>& tokens) {
  torch::NoGradGuard no_grad;
  std::vector<int64_t> ids(prompt.begin(), prompt.end());
  ids.insert(ids.end(), tokens.begin(), tokens.end());
  const int64_t t = static_cast<int64_t>(ids.size());
  torch::Tensor logits =
      m->Logits(m->Hidden(torch::tensor(ids).unsqueeze(0), torch::arange(t).unsqueeze(0),
                          torch::zeros({1, t}, torch::kLong)))[0];
  torch::Tensor lp = torch::log_softmax(logits.to(torch::kFloat32), -1);
  std::vector<float> out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    out.push_back(lp[static_cast<int64_t>(prompt.size() + i) - 1][tokens[i]].item<float>());
  }
  return out;
}

// A bf16 model through the kernel path (bf16 KV pools): its logprobs must be as close to the
// fp32 model's as the trainer's dense bf16 forward of the same weights is.
TEST_P(EngineKernelLibraryTest, Bf16LogprobsAreAsCloseToFp32AsTheDenseBf16Forward) {
  const TransformerConfig config = KernelCaseConfig(4, 2, 8);
  Transformer fp32 = KernelCaseModel(config, 4), dense = KernelCaseModel(config, 4);
  dense->to(torch::kBFloat16);
  Transformer engine_model = KernelCaseModel(config, 4);
  engine_model->to(torch::Device(GetParam()), torch::kBFloat16);
  EngineSettings s;
  s.num_blocks = 128, s.block_size = 5, s.max_batch = 32, s.max_tokens_per_step = 7;
  s.use_kernel_library = true;
  const std::vector<GenerationRequest> requests = KernelCaseRequests(4, 4, 4, 13, 10);
  const KernelCaseRun run = RunKernelCase(engine_model, s, requests);
  ASSERT_EQ(run.done.size(), requests.size());
  double engine_max = 0, dense_max = 0, engine_sum = 0, dense_sum = 0;
  for (const auto& [id, g] : run.done) {
    for (const GeneratedSample& smp : g.samples) {
      const std::vector<float> want = DenseLogprobs(fp32, g.prompt, smp.tokens);
      const std::vector<float> bf16 = DenseLogprobs(dense, g.prompt, smp.tokens);
      for (size_t t = 0; t < smp.tokens.size(); ++t) {
        const double e = std::abs(smp.logprobs[t] - want[t]), d = std::abs(bf16[t] - want[t]);
        engine_max = std::max(engine_max, e), dense_max = std::max(dense_max, d);
        engine_sum += e, dense_sum += d;
      }
    }
  }
  EXPECT_GT(dense_sum, 0);  // bf16 did round
  // Rounding noise of the same size: on average no worse, at the worst token within 1.5x.
  EXPECT_LE(engine_sum, dense_sum);
  EXPECT_LE(engine_max, 1.5 * dense_max)
      << "the dense bf16 forward's largest error is " << dense_max;
}

}  // namespace
}  // namespace rlforge
