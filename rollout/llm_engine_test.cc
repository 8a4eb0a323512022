#include "rollout/llm_engine.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "absl/strings/str_cat.h"
#include "models/hf_checkpoint.h"
#include "models/safetensors.h"
#include "rlforge_paths.h"

namespace rlforge {
namespace {

using models::Transformer;
using models::TransformerConfig;

TransformerConfig TinyConfig() {
  TransformerConfig c;
  c.architecture = "LlamaForCausalLM";
  c.vocab_size = 61;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = 512;
  c.rope_theta = 10000;
  c.rms_norm_eps = 1e-6;
  return c;
}

Transformer TinyModel(uint64_t seed) {
  torch::manual_seed(seed);
  Transformer m(TinyConfig());
  // Larger weights than the default init make the next-token distribution
  // peaked enough that greedy decoding has no near-ties.
  torch::NoGradGuard g;
  for (auto& p : m->parameters()) p.mul_(3.0);
  m->eval();
  return m;
}

torch::Tensor FullLogits(Transformer& m, const std::vector<int32_t>& tokens) {
  torch::NoGradGuard g;
  const int64_t t = static_cast<int64_t>(tokens.size());
  std::vector<int64_t> ids(tokens.begin(), tokens.end());
  torch::Tensor tok = torch::tensor(ids, torch::kLong).unsqueeze(0);
  torch::Tensor pos = torch::arange(t, torch::kLong).unsqueeze(0);
  torch::Tensor seg = torch::zeros({1, t}, torch::kLong);
  return m->Logits(m->Hidden(tok, pos, seg))[0];
}

// Greedy generation by recomputing the whole sequence for every token.
std::vector<int32_t> NaiveGreedy(Transformer& m, std::vector<int32_t> tokens, int64_t max_new,
                                 int32_t eos) {
  std::vector<int32_t> out;
  for (int64_t i = 0; i < max_new; ++i) {
    int32_t next = FullLogits(m, tokens)[-1].argmax().item<int64_t>();
    tokens.push_back(next);
    out.push_back(next);
    if (next == eos) break;
  }
  return out;
}

std::vector<int32_t> RandomPrompt(std::mt19937& rng, int64_t len) {
  std::uniform_int_distribution<int> tok(1, 60);
  std::vector<int32_t> p(len);
  for (auto& t : p) t = tok(rng);
  return p;
}

EngineSettings Settings(int64_t num_blocks, int64_t block_size = 4) {
  EngineSettings s;
  s.num_blocks = num_blocks;
  s.block_size = block_size;
  s.max_batch = 64;
  s.max_tokens_per_step = 256;
  return s;
}

std::map<uint64_t, FinishedGroup> RunAll(LlmEngine& engine) {
  std::map<uint64_t, FinishedGroup> done;
  while (engine.HasUnfinished()) {
    const absl::Status s = engine.Step();
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) break;  // the next step would fail the same way
    for (auto& g : engine.TakeFinished()) {
      EXPECT_FALSE(done.count(g.request_id)) << "request " << g.request_id << " finished twice";
      done[g.request_id] = std::move(g);
    }
  }
  return done;
}

TEST(LlmEngine, GreedyMatchesNaiveRecomputeTokenForToken) {
  Transformer m = TinyModel(1);
  LlmEngine engine(m, Settings(256), 0);
  std::mt19937 rng(1);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) {
    prompts.push_back(RandomPrompt(rng, 1 + 5 * i));
    GenerationRequest r;
    r.id = i;
    r.prompt = prompts.back();
    r.n = 1 + i % 3;
    r.params.temperature = 0;
    r.params.max_tokens = 12 + i;
    r.params.stop_token_ids = {0};
    ASSERT_TRUE(engine.Submit(r).ok());
  }
  auto done = RunAll(engine);
  ASSERT_EQ(done.size(), 6u);
  for (int i = 0; i < 6; ++i) {
    auto want = NaiveGreedy(m, prompts[i], 12 + i, 0);
    ASSERT_EQ(done[i].samples.size(), size_t(1 + i % 3));
    for (const auto& s : done[i].samples) EXPECT_EQ(s.tokens, want) << "request " << i;
  }
}

// The engine's own step is fp32 only: a bf16 model takes the kernel library's path unasked,
// and generates (its numerics against fp32: EngineKernelLibraryTest's bf16 case).
TEST(LlmEngine, ABf16ModelTakesTheKernelLibraryPathUnasked) {
  Transformer fp32 = TinyModel(1);
  EXPECT_FALSE(LlmEngine(fp32, Settings(64), 0).uses_kernel_library());
  Transformer bf16 = TinyModel(1);
  bf16->to(torch::kBFloat16);
  LlmEngine engine(bf16, Settings(64), 0);
  EXPECT_TRUE(engine.uses_kernel_library());
  GenerationRequest r;
  r.id = 1;
  r.prompt = {3, 4, 5};
  r.n = 2;
  r.params.temperature = 0;
  r.params.max_tokens = 4;
  ASSERT_TRUE(engine.Submit(r).ok());
  auto done = RunAll(engine);
  ASSERT_EQ(done.size(), 1u);
  for (const auto& smp : done[0].samples) EXPECT_EQ(smp.tokens.size(), 4u);
}

// Qwen3 checkpoints made by transformers (tools/make_lm_fixtures.py) with the tokens its
// greedy generate produced: q/k norms, head_dim != hidden / heads, tied and untied with
// attention biases, through chunked prefill, paging and a shared prompt.
TEST(LlmEngine, GreedyMatchesTransformersOnQwen3Checkpoints) {
  for (const std::string name : {"qwen3_tied", "qwen3_untied"}) {
    const std::string dir = std::string(RLFORGE_SOURCE_DIR_DEFAULT) + "/tests/data/lm/" + name;
    auto model = models::LoadHfModel(dir);
    ASSERT_TRUE(model.ok()) << model.status();
    auto ref = models::SafetensorsFile::Open(dir + "/reference.safetensors");
    ASSERT_TRUE(ref.ok()) << ref.status();
    auto prompt = (*ref)->Read("greedy_prompt"), want = (*ref)->Read("greedy_tokens");
    ASSERT_TRUE(prompt.ok() && want.ok());
    EngineSettings settings = Settings(64);
    settings.max_tokens_per_step = 3;
    LlmEngine engine(*model, settings, 0);
    GenerationRequest r;
    r.id = 1;
    r.n = 2;
    for (int64_t i = 0; i < prompt->numel(); ++i) r.prompt.push_back((*prompt)[i].item<int32_t>());
    r.params.temperature = 0;
    r.params.max_tokens = want->numel();
    ASSERT_TRUE(engine.Submit(r).ok());
    auto done = RunAll(engine);
    ASSERT_EQ(done[1].samples.size(), 2u);
    std::vector<int32_t> expected;
    for (int64_t i = 0; i < want->numel(); ++i) expected.push_back((*want)[i].item<int32_t>());
    for (const auto& s : done[1].samples) EXPECT_EQ(s.tokens, expected) << name;
  }
}

TEST(LlmEngine, LogprobsEqualTheTrainersForward) {
  Transformer m = TinyModel(2);
  EngineSettings settings = Settings(256);
  settings.max_tokens_per_step = 7;  // chunked prefill too
  LlmEngine engine(m, settings, 3);
  std::mt19937 rng(2);
  for (int i = 0; i < 4; ++i) {
    GenerationRequest r;
    r.id = i;
    r.prompt = RandomPrompt(rng, 3 + 4 * i);
    r.n = 4;
    r.params.seed = 100 + i;
    r.params.max_tokens = 20;
    r.params.temperature = 0.8;
    r.params.top_p = 0.95;
    ASSERT_TRUE(engine.Submit(r).ok());
  }
  auto done = RunAll(engine);
  double max_diff = 0;
  for (auto& [id, g] : done) {
    for (const auto& s : g.samples) {
      std::vector<int32_t> full = g.prompt;
      full.insert(full.end(), s.tokens.begin(), s.tokens.end());
      torch::Tensor lp = torch::log_softmax(FullLogits(m, full), -1);
      for (size_t t = 0; t < s.tokens.size(); ++t) {
        float want = lp[g.prompt.size() - 1 + t][s.tokens[t]].item<float>();
        max_diff = std::max(max_diff, double(std::abs(want - s.logprobs[t])));
        EXPECT_EQ(s.versions[t], 3);
      }
      EXPECT_EQ(s.finish_reason, "length");
    }
  }
  EXPECT_LT(max_diff, 1e-5);
}

TEST(LlmEngine, PrefixSharingChangesNothingButMemory) {
  Transformer m = TinyModel(3);
  std::mt19937 rng(3);
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 5; ++i) {
    GenerationRequest r;
    r.id = i;
    r.prompt = RandomPrompt(rng, i == 0 ? 2 : 9 + 3 * i);  // the first is shorter than a block
    r.n = 8;
    r.params.seed = 7 + i;
    r.params.max_tokens = 10;
    r.params.top_k = 20;
    requests.push_back(r);
  }
  std::map<uint64_t, FinishedGroup> results[2];
  EngineStats stats[2];
  for (int shared = 0; shared < 2; ++shared) {
    EngineSettings s = Settings(512);
    s.prefix_sharing = shared;
    LlmEngine engine(m, s, 0);
    for (const auto& r : requests) ASSERT_TRUE(engine.Submit(r).ok());
    results[shared] = RunAll(engine);
    stats[shared] = engine.stats();
  }
  for (int i = 0; i < 5; ++i) {
    for (int j = 0; j < 8; ++j) {
      EXPECT_EQ(results[0][i].samples[j].tokens, results[1][i].samples[j].tokens)
          << "request " << i << " sample " << j;
    }
  }
  // Each prompt's KV is written once for its 8 samples, its last partial block
  // included (the samples continue in blocks of their own: no copy-on-write).
  EXPECT_EQ(stats[1].cow_copies, 0);
  EXPECT_EQ(stats[1].prompt_kv_slots * 8, stats[0].prompt_kv_slots);
  EXPECT_LT(stats[1].peak_blocks, stats[0].peak_blocks);
}

TEST(LlmEngine, StressWithPreemptionFinishesEveryRequestOnceAndCorrectly) {
  Transformer m = TinyModel(4);
  EngineSettings s = Settings(40);  // 160 slots for up to ~30 sequences of ~30 tokens
  s.max_tokens_per_step = 32;
  LlmEngine engine(m, s, 0);
  std::mt19937 rng(4);
  std::uniform_int_distribution<int> len(1, 20), new_tokens(1, 24), n(1, 4), arrivals(0, 3);
  std::map<uint64_t, GenerationRequest> submitted;
  std::map<uint64_t, FinishedGroup> done;
  uint64_t next_id = 0;
  for (int step = 0; step < 2000 && (next_id < 40 || engine.HasUnfinished()); ++step) {
    for (int a = arrivals(rng); a > 0 && next_id < 40; --a) {
      GenerationRequest r;
      r.id = next_id++;
      r.prompt = RandomPrompt(rng, len(rng));
      r.n = n(rng);
      r.params.temperature = 0;
      r.params.max_tokens = new_tokens(rng);
      r.params.stop_token_ids = {0};
      ASSERT_TRUE(engine.Submit(r).ok());
      submitted[r.id] = r;
    }
    ASSERT_TRUE(engine.Step().ok());
    for (auto& g : engine.TakeFinished()) {
      ASSERT_FALSE(done.count(g.request_id)) << "request " << g.request_id << " finished twice";
      done[g.request_id] = std::move(g);
    }
  }
  EXPECT_GT(engine.stats().preemptions, 0) << "the pool was meant to force preemption";
  ASSERT_EQ(done.size(), submitted.size());
  EXPECT_EQ(engine.blocks().num_used(), 0);
  for (auto& [id, r] : submitted) {
    auto want = NaiveGreedy(m, r.prompt, r.params.max_tokens, 0);
    ASSERT_EQ(done[id].samples.size(), size_t(r.n));
    for (const auto& smp : done[id].samples) EXPECT_EQ(smp.tokens, want) << "request " << id;
  }
}

TEST(LlmEngine, StopTokenStopStringAndLength) {
  Transformer m = TinyModel(5);
  std::mt19937 rng(5);
  auto prompt = RandomPrompt(rng, 6);
  auto free_run = NaiveGreedy(m, prompt, 12, -1);
  EngineSettings s = Settings(64);
  s.detokenize = [](const std::vector<int32_t>& ids) {
    std::string text;
    for (int32_t t : ids) absl::StrAppend(&text, "<", t, ">");
    return text;
  };
  LlmEngine engine(m, s, 0);
  GenerationRequest by_token, by_string, by_length;
  by_token.id = 1;
  by_token.prompt = prompt;
  by_token.params.temperature = 0;
  by_token.params.max_tokens = 12;
  by_token.params.stop_token_ids = {free_run[4]};
  by_string = by_token;
  by_string.id = 2;
  by_string.params.stop_token_ids = {};
  by_string.params.stop_strings = {absl::StrCat("<", free_run[2], "><", free_run[3], ">")};
  by_length = by_string;
  by_length.id = 3;
  by_length.params.stop_strings = {};
  by_length.params.max_tokens = 5;
  for (auto* r : {&by_token, &by_string, &by_length}) ASSERT_TRUE(engine.Submit(*r).ok());
  auto done = RunAll(engine);
  // The first occurrence of the stop token ends the sequence.
  size_t first = std::find(free_run.begin(), free_run.end(), free_run[4]) - free_run.begin();
  EXPECT_EQ(done[1].samples[0].tokens,
            std::vector<int32_t>(free_run.begin(), free_run.begin() + first + 1));
  EXPECT_EQ(done[1].samples[0].finish_reason, "stop");
  EXPECT_EQ(done[2].samples[0].finish_reason, "stop");
  EXPECT_LE(done[2].samples[0].tokens.size(), 4u);
  EXPECT_EQ(done[3].samples[0].tokens.size(), 5u);
  EXPECT_EQ(done[3].samples[0].finish_reason, "length");
}

void Perturb(Transformer& m) {
  for (auto& p : m->parameters()) p.add_(torch::randn_like(p) * 0.5);
}

TEST(LlmEngine, DrainFinishesInFlightOnTheOldVersion) {
  Transformer m = TinyModel(6);
  LlmEngine engine(m, Settings(128), 1);
  std::mt19937 rng(6);
  GenerationRequest a;
  a.id = 1;
  a.prompt = RandomPrompt(rng, 5);
  a.n = 2;
  a.params.temperature = 0;
  a.params.max_tokens = 10;
  ASSERT_TRUE(engine.Submit(a).ok());
  ASSERT_TRUE(engine.Step().ok());
  ASSERT_TRUE(engine.Step().ok());
  Transformer old_model = TinyModel(6);
  auto old_greedy = NaiveGreedy(old_model, a.prompt, 10, -1);
  torch::manual_seed(60);
  engine.RequestWeightUpdate(
      [](Transformer& model) {
        Perturb(model);
        return absl::OkStatus();
      },
      2);
  GenerationRequest b = a;
  b.id = 2;
  ASSERT_TRUE(engine.Submit(b).ok());
  auto done = RunAll(engine);
  EXPECT_EQ(engine.policy_version(), 2);
  for (const auto& s : done[1].samples) {
    EXPECT_EQ(s.tokens, old_greedy);
    for (int64_t v : s.versions) EXPECT_EQ(v, 1);
  }
  auto new_greedy = NaiveGreedy(engine.model(), b.prompt, 10, -1);
  for (const auto& s : done[2].samples) {
    EXPECT_EQ(s.tokens, new_greedy);
    for (int64_t v : s.versions) EXPECT_EQ(v, 2);
  }
}

TEST(LlmEngine, RecomputeTakesNewWeightsMidSequence) {
  Transformer m = TinyModel(7);
  EngineSettings s = Settings(128);
  s.weight_update = "recompute";
  LlmEngine engine(m, s, 1);
  std::mt19937 rng(7);
  GenerationRequest a;
  a.id = 1;
  a.prompt = RandomPrompt(rng, 5);
  a.params.temperature = 0;
  a.params.max_tokens = 10;
  ASSERT_TRUE(engine.Submit(a).ok());
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(engine.Step().ok());  // prefill + 3 decodes
  torch::manual_seed(70);
  engine.RequestWeightUpdate(
      [](Transformer& model) {
        Perturb(model);
        return absl::OkStatus();
      },
      2);
  auto done = RunAll(engine);
  const auto& smp = done[1].samples[0];
  ASSERT_EQ(smp.tokens.size(), 10u);
  int64_t old_tokens = std::count(smp.versions.begin(), smp.versions.end(), 1);
  EXPECT_EQ(old_tokens, 4);
  // After the update, the continuation is what the new weights give the prefix.
  std::vector<int32_t> prefix = a.prompt;
  prefix.insert(prefix.end(), smp.tokens.begin(), smp.tokens.begin() + old_tokens);
  auto cont = NaiveGreedy(engine.model(), prefix, 10 - old_tokens, -1);
  EXPECT_EQ(std::vector<int32_t>(smp.tokens.begin() + old_tokens, smp.tokens.end()), cont);
}

// Partial rollouts (rollout.partial): sampled groups that span a weight update record, token
// by token, the version that sampled each token and its logprob under that version's weights
// on the whole prefix (so the prefix's KV was recomputed under the new weights, never mixed).
TEST(LlmEngine, RecomputeRecordsEachTokensVersionAndLogprobWhereTheUpdateHappened) {
  Transformer m = TinyModel(8);
  EngineSettings s = Settings(128);
  s.weight_update = "recompute";
  LlmEngine engine(m, s, 1);
  std::mt19937 rng(8);
  GenerationRequest a;
  a.id = 1;
  a.prompt = RandomPrompt(rng, 6);
  a.n = 3;
  a.params.seed = 80;
  a.params.temperature = 0.9;
  a.params.max_tokens = 12;
  ASSERT_TRUE(engine.Submit(a).ok());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(engine.Step().ok());
  // Every sample is running (none stops: no stop token), each with the same count so far.
  const int64_t before = engine.stats().generated_tokens / a.n;
  ASSERT_EQ(before * a.n, engine.stats().generated_tokens);
  ASSERT_GT(before, 1);
  Transformer old_model = TinyModel(8);
  torch::manual_seed(81);
  engine.RequestWeightUpdate(
      [](Transformer& model) {
        Perturb(model);
        return absl::OkStatus();
      },
      2);
  auto done = RunAll(engine);
  ASSERT_EQ(done[1].samples.size(), 3u);
  for (const auto& smp : done[1].samples) {
    ASSERT_EQ(smp.tokens.size(), 12u);
    std::vector<int64_t> want(12, 2);
    std::fill(want.begin(), want.begin() + before, 1);
    EXPECT_EQ(smp.versions, want) << "sample " << smp.index;
    std::vector<int32_t> full = a.prompt;
    full.insert(full.end(), smp.tokens.begin(), smp.tokens.end());
    const torch::Tensor lp_old = torch::log_softmax(FullLogits(old_model, full), -1);
    const torch::Tensor lp_new = torch::log_softmax(FullLogits(engine.model(), full), -1);
    for (size_t t = 0; t < smp.tokens.size(); ++t) {
      const torch::Tensor& lp = smp.versions[t] == 1 ? lp_old : lp_new;
      const float expect = lp[a.prompt.size() - 1 + t][smp.tokens[t]].item<float>();
      EXPECT_NEAR(smp.logprobs[t], expect, 1e-4) << "sample " << smp.index << " token " << t;
    }
  }
}

TEST(LlmEngine, SubmitRejectsBadRequestsByName) {
  Transformer m = TinyModel(8);
  LlmEngine engine(m, Settings(8), 0);
  GenerationRequest r;
  r.id = 9;
  EXPECT_NE(engine.Submit(r).message().find("empty prompt"), std::string::npos);
  r.prompt = {1, 99};
  EXPECT_NE(engine.Submit(r).message().find("prompt token 1 is 99"), std::string::npos);
  r.prompt = {1, 2};
  r.params.max_tokens = 100;
  EXPECT_NE(engine.Submit(r).message().find("KV blocks"), std::string::npos);
  r.params.max_tokens = 4;
  r.params.stop_strings = {"x"};
  EXPECT_NE(engine.Submit(r).message().find("tokenizer"), std::string::npos);
  EXPECT_FALSE(engine.HasUnfinished());
}

}  // namespace
}  // namespace rlforge
