// The engine through the kernel library (EngineSettings::use_kernel_library) against the CPU
// engine's own path, on the same model, seeds and requests: greedy, the same tokens, the same
// logprobs within a tolerance, the same scheduling. Sampled draws come from the sampler kernel's
// stream (not the own path's RNG): they are checked for what they must be (the model's
// logprobs, independent of the batch, the seed's, the references' on a GPU). Included by exactly
// one test file per binary, which instantiates the suite for its device: llm_engine_kernels_test.cc
// on the CPU (the kernels' references), llm_engine_kernels_gpu_test.cc on CUDA (the kernels
// themselves; skipped, saying why, where this build or machine cannot run them).
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <random>
#include <set>
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

struct KernelCaseRun {
  std::map<uint64_t, FinishedGroup> done;
  EngineStats stats;
  int64_t graph_sizes = 0;  // decode graphs' padded sizes used (0: none)
};

// Submits every request at once, then steps the engine to the end.
KernelCaseRun RunRequests(LlmEngine& engine, const std::vector<GenerationRequest>& requests) {
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
  if (engine.decode_graphs() != nullptr) run.graph_sizes = engine.decode_graphs()->graphs();
  return run;
}

KernelCaseRun RunKernelCase(Transformer model, const EngineSettings& settings,
                            const std::vector<GenerationRequest>& requests, int64_t version = 0) {
  LlmEngine engine(std::move(model), settings, version);
  return RunRequests(engine, requests);
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

  // On this suite's device through the kernel library; on the CPU through the references.
  static Transformer OnDevice(Transformer model) {
    model->to(torch::Device(GetParam()));
    return model;
  }
  // CPU: the references sum in double where the engine sums in float; CUDA: fp32 kernels
  // and cuBLAS in another order.
  static double Tolerance() { return GetParam() == torch::kCPU ? 2e-5 : 1e-3; }

  // Expects the same groups: tokens, finish reasons, versions equal; logprobs within Tolerance.
  static void ExpectSameGroups(const KernelCaseRun& want, const KernelCaseRun& got, size_t count,
                               bool same_schedule = true) {
    EXPECT_EQ(want.done.size(), count);
    EXPECT_EQ(got.done.size(), count);
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
    EXPECT_LT(max_diff, Tolerance());
    if (!same_schedule) return;
    // The same scheduling, step for step: what the two runs computed differs only in rounding.
    const EngineStats &a = got.stats, &b = want.stats;
    EXPECT_EQ(a.steps, b.steps);
    EXPECT_EQ(a.generated_tokens, b.generated_tokens);
    EXPECT_EQ(a.prefill_tokens, b.prefill_tokens);
    EXPECT_EQ(a.preemptions, b.preemptions);
    EXPECT_EQ(a.peak_blocks, b.peak_blocks);
    EXPECT_EQ(a.prompt_kv_slots, b.prompt_kv_slots);
  }

  // Every drawn token's logprob is the fp32 model's log-softmax at it (a dense forward).
  static void ExpectDenseLogprobs(Transformer& fp32, const KernelCaseRun& run) {
    double max_diff = 0;
    for (const auto& [id, g] : run.done) {
      for (const GeneratedSample& smp : g.samples) {
        const std::vector<float> want = DenseLogprobs(fp32, g.prompt, smp.tokens);
        for (size_t t = 0; t < smp.tokens.size(); ++t) {
          max_diff = std::max(max_diff, double{std::abs(smp.logprobs[t] - want[t])});
        }
      }
    }
    EXPECT_LT(max_diff, 5 * Tolerance());  // a dense forward sums in yet another order
  }

  // `requests` made greedy run through the CPU engine's own path and through the kernel library
  // on this suite's device: the same groups, the same scheduling. As given (greedy and sampled,
  // top-k and top-p), through the kernel library on this device: logprobs the model's, and on
  // a GPU the same draws as the kernels' CPU references make. Returns the greedy runs' stats
  // (own path, kernel path).
  std::pair<EngineStats, EngineStats> ExpectSameGenerations(
      const TransformerConfig& config, uint64_t seed, EngineSettings settings,
      const std::vector<GenerationRequest>& requests) {
    std::vector<GenerationRequest> greedy = requests;
    for (GenerationRequest& r : greedy) r.params.temperature = 0;
    settings.use_kernel_library = false;
    const KernelCaseRun own = RunKernelCase(KernelCaseModel(config, seed), settings, greedy);
    settings.use_kernel_library = true;
    const KernelCaseRun got =
        RunKernelCase(OnDevice(KernelCaseModel(config, seed)), settings, greedy);
    ExpectSameGroups(own, got, requests.size());

    const KernelCaseRun sampled =
        RunKernelCase(OnDevice(KernelCaseModel(config, seed)), settings, requests);
    Transformer fp32 = KernelCaseModel(config, seed);
    ExpectDenseLogprobs(fp32, sampled);
    if (GetParam() != torch::kCPU) {
      ExpectSameGroups(RunKernelCase(KernelCaseModel(config, seed), settings, requests), sampled,
                       requests.size());
    }
    return {own.stats, got.stats};
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

// The default init's near-uniform next-token distribution: draws spread over the vocabulary.
Transformer SamplingCaseModel(uint64_t seed) {
  torch::manual_seed(seed);
  Transformer m(KernelCaseConfig(4, 2, 8));
  m->eval();
  return m;
}

GenerationRequest SampledRequest(uint64_t id, uint64_t seed, int64_t n) {
  GenerationRequest r;
  r.id = id;
  r.prompt = {5, 17, 3, 44, 9, 21};
  r.n = n;
  r.params.temperature = 1.0;
  r.params.max_tokens = 12;
  r.params.seed = seed;
  return r;
}

// A sample's draws depend on its request's seed and its index only: not on what else shares
// its batches (other groups, chunked prefills beside it) and not on the run.
TEST_P(EngineKernelLibraryTest, SampledTokensDependOnTheSeedNotTheBatch) {
  EngineSettings s;
  s.num_blocks = 256, s.block_size = 4, s.max_batch = 32, s.max_tokens_per_step = 7;
  s.use_kernel_library = true;
  const GenerationRequest mine = SampledRequest(99, 5, 1);
  const KernelCaseRun alone = RunKernelCase(OnDevice(SamplingCaseModel(6)), s, {mine});
  const KernelCaseRun again = RunKernelCase(OnDevice(SamplingCaseModel(6)), s, {mine});
  std::vector<GenerationRequest> crowd = KernelCaseRequests(6, 5, 3, 13, 12);
  crowd.insert(crowd.begin() + 2, mine);
  const KernelCaseRun beside = RunKernelCase(OnDevice(SamplingCaseModel(6)), s, crowd);
  GenerationRequest reseeded = mine;
  reseeded.params.seed = 6;
  const KernelCaseRun other = RunKernelCase(OnDevice(SamplingCaseModel(6)), s, {reseeded});
  ASSERT_EQ(alone.done.count(99), 1u);
  ASSERT_EQ(again.done.count(99), 1u);
  ASSERT_EQ(beside.done.count(99), 1u);
  ASSERT_EQ(other.done.count(99), 1u);
  const std::vector<int32_t>& tokens = alone.done.at(99).samples.at(0).tokens;
  EXPECT_EQ(tokens.size(), 12u);
  EXPECT_EQ(again.done.at(99).samples.at(0).tokens, tokens);
  EXPECT_EQ(beside.done.at(99).samples.at(0).tokens, tokens);
  EXPECT_NE(other.done.at(99).samples.at(0).tokens, tokens) << "another seed drew the same";
}

// The n samples of a shared prompt draw their first tokens from one logits row, each with its
// own seed: they draw apart, and exactly what unshared samples of the same request draw.
TEST_P(EngineKernelLibraryTest, ForkedSamplesDrawApartAndAsUnsharedSamples) {
  EngineSettings s;
  s.num_blocks = 256, s.block_size = 4, s.max_batch = 32;
  s.use_kernel_library = true;
  const GenerationRequest group = SampledRequest(1, 11, 8);
  const KernelCaseRun shared = RunKernelCase(OnDevice(SamplingCaseModel(7)), s, {group});
  s.prefix_sharing = false;
  const KernelCaseRun unshared = RunKernelCase(OnDevice(SamplingCaseModel(7)), s, {group});
  ASSERT_EQ(shared.done.count(1), 1u);
  ASSERT_EQ(unshared.done.count(1), 1u);
  EXPECT_EQ(shared.stats.prompt_kv_slots * 8, unshared.stats.prompt_kv_slots);  // it did share
  std::set<int32_t> first;
  std::set<std::vector<int32_t>> whole;
  const std::vector<GeneratedSample>& samples = shared.done.at(1).samples;
  ASSERT_EQ(samples.size(), 8u);
  for (size_t j = 0; j < samples.size(); ++j) {
    EXPECT_EQ(samples[j].tokens, unshared.done.at(1).samples.at(j).tokens) << "sample " << j;
    first.insert(samples[j].tokens.at(0));
    whole.insert(samples[j].tokens);
  }
  EXPECT_GT(first.size(), 1u) << "all 8 samples drew the same first token";
  EXPECT_EQ(whole.size(), 8u) << "two samples drew the same 12 tokens";
}

// top_k 1 at temperature 1 leaves one candidate: the greedy token, with the same logprob.
TEST_P(EngineKernelLibraryTest, TopKOneIsGreedy) {
  EngineSettings s;
  s.num_blocks = 256, s.block_size = 4, s.max_batch = 32;
  s.use_kernel_library = true;
  std::vector<GenerationRequest> greedy = KernelCaseRequests(8, 4, 3, 13, 10), top1 = greedy;
  for (GenerationRequest& r : greedy) r.params.temperature = 0;
  for (GenerationRequest& r : top1)
    r.params.temperature = 1, r.params.top_k = 1, r.params.top_p = 1;
  ExpectSameGroups(RunKernelCase(OnDevice(SamplingCaseModel(8)), s, greedy),
                   RunKernelCase(OnDevice(SamplingCaseModel(8)), s, top1), greedy.size());
}

// Settings whose decode steps go through DecodeGraphs: on CUDA captured graphs; on the CPU the
// same padded static-buffer steps, eagerly.
EngineSettings GraphSettings(bool graphs) {
  EngineSettings s;
  s.num_blocks = 256, s.block_size = 5, s.max_batch = 16, s.max_tokens_per_step = 64;
  s.use_kernel_library = true;
  s.cuda_graphs = graphs;
  s.pad_decode_steps_on_cpu = graphs;
  return s;
}

// Decode steps through the graphs generate what eager steps do: 5 groups of 3 samples (greedy,
// top-k, top-p), so batches of 15 rows and fewer as samples stop, padded to several sizes.
TEST_P(EngineKernelLibraryTest, DecodeGraphsGenerateAsEagerSteps) {
  const TransformerConfig config = KernelCaseConfig(4, 2, 8);
  std::vector<GenerationRequest> requests = KernelCaseRequests(9, 5, 3, 13, 12);
  for (size_t i = 0; i < requests.size(); ++i) {
    requests[i].params.max_tokens = 4 + 4 * static_cast<int64_t>(i);  // batches shrink in steps
    requests[i].params.stop_token_ids.clear();
  }
  const KernelCaseRun want =
      RunKernelCase(OnDevice(KernelCaseModel(config, 9)), GraphSettings(false), requests);
  const KernelCaseRun got =
      RunKernelCase(OnDevice(KernelCaseModel(config, 9)), GraphSettings(true), requests);
  ExpectSameGroups(want, got, requests.size());
  EXPECT_EQ(want.stats.graph_steps, 0);
  EXPECT_GT(got.stats.graph_steps, 0);
  EXPECT_GE(got.graph_sizes, 3) << "the batches were meant to pad to several sizes";
}

// Graphs captured under one version replay the next one's weights: updates copy into the
// parameters' storage, which the graphs read.
TEST_P(EngineKernelLibraryTest, DecodeGraphsSeeWeightUpdates) {
  const TransformerConfig config = KernelCaseConfig(4, 2, 8);
  const std::vector<GenerationRequest> first = KernelCaseRequests(10, 4, 3, 13, 10);
  std::vector<GenerationRequest> second = KernelCaseRequests(11, 4, 3, 13, 10);
  for (GenerationRequest& r : second) r.id += 100;
  LlmEngine engine(OnDevice(KernelCaseModel(config, 10)), GraphSettings(true), 0);
  RunRequests(engine, first);
  ASSERT_NE(engine.decode_graphs(), nullptr);
  const int64_t captured = engine.decode_graphs()->graphs();
  EXPECT_GT(captured, 0);
  Transformer next = KernelCaseModel(config, 11);
  engine.RequestWeightUpdate(
      [&](Transformer& m) {
        const std::vector<torch::Tensor> to = m->parameters(), from = next->parameters();
        for (size_t i = 0; i < to.size(); ++i) to[i].copy_(from[i]);
        return absl::OkStatus();
      },
      1);
  const KernelCaseRun got = RunRequests(engine, second);
  EXPECT_EQ(engine.decode_graphs()->drops(), 0);  // the update moved no parameter
  const KernelCaseRun want =
      RunKernelCase(OnDevice(KernelCaseModel(config, 11)), GraphSettings(false), second, 1);
  ExpectSameGroups(want, got, second.size(), /*same_schedule=*/false);
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
