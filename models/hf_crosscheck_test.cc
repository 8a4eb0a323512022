// Cross-checks against transformers: tiny random models and their reference logits,
// made by tools/make_lm_fixtures.py and committed under tests/data/lm/.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "models/hf_checkpoint.h"
#include "models/safetensors.h"
#include "rlforge_paths.h"

namespace rlforge::models {
namespace {

std::string FixtureDir(const std::string& name) {
  return std::string(RLFORGE_SOURCE_DIR_DEFAULT) + "/tests/data/lm/" + name;
}

struct Reference {
  torch::Tensor tokens, logits;
  torch::Tensor incremental_logits;  // [T, vocab]: row 0 fed token by token with a KV cache
};

Reference LoadReference(const std::string& dir) {
  auto f = SafetensorsFile::Open(dir + "/reference.safetensors");
  EXPECT_TRUE(f.ok()) << f.status();
  if (!f.ok()) return {};
  return {*(*f)->Read("tokens"), *(*f)->Read("logits"), *(*f)->Read("incremental_logits")};
}

// Max abs error relative to the largest reference logit.
double RelativeError(const torch::Tensor& got, const torch::Tensor& want) {
  return ((got.to(torch::kFloat32) - want).abs().max() / want.abs().max()).item<double>();
}

class HfCrosscheckTest : public ::testing::TestWithParam<std::string> {};

TEST_P(HfCrosscheckTest, LogitsMatchTransformersFp32) {
  const std::string dir = FixtureDir(GetParam());
  auto model = LoadHfModel(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  Reference ref = LoadReference(dir);
  ASSERT_TRUE(ref.tokens.defined());
  torch::NoGradGuard g;
  const int64_t B = ref.tokens.size(0), T = ref.tokens.size(1);
  auto pos = torch::arange(T, torch::kInt64).view({1, T}).expand({B, T});
  auto logits =
      (*model)->Logits((*model)->Hidden(ref.tokens, pos, torch::zeros({B, T}, torch::kInt64)));
  ASSERT_EQ(logits.sizes(), ref.logits.sizes());
  EXPECT_LT(RelativeError(logits, ref.logits), 1e-4);
}

TEST_P(HfCrosscheckTest, IncrementalLogitsMatchTransformers) {
  const std::string dir = FixtureDir(GetParam());
  auto model = LoadHfModel(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  Reference ref = LoadReference(dir);
  ASSERT_TRUE(ref.tokens.defined());
  torch::NoGradGuard g;
  auto& m = *model;
  const int64_t L = m->config().num_hidden_layers, T = ref.tokens.size(1);
  std::vector<torch::Tensor> kc(L), vc(L);
  auto attend = [&](int64_t layer, const torch::Tensor& q, const torch::Tensor& k,
                    const torch::Tensor& v) {
    kc[layer] = kc[layer].defined() ? torch::cat({kc[layer], k}) : k;
    vc[layer] = vc[layer].defined() ? torch::cat({vc[layer], v}) : v;
    return m->ContiguousAttention(q, kc[layer], vc[layer]);
  };
  for (int64_t t = 0; t < T; ++t) {
    auto logits = m->Logits(m->HiddenIncremental(ref.tokens[0].narrow(0, t, 1),
                                                 torch::full({1}, t, torch::kInt64), attend));
    EXPECT_LT(RelativeError(logits[0], ref.incremental_logits[t]), 1e-4) << "position " << t;
  }
}

TEST_P(HfCrosscheckTest, Bf16LoadTracksReference) {
  const std::string dir = FixtureDir(GetParam());
  auto model = LoadHfModel(dir, torch::kBFloat16);
  ASSERT_TRUE(model.ok()) << model.status();
  Reference ref = LoadReference(dir);
  ASSERT_TRUE(ref.tokens.defined());
  torch::NoGradGuard g;
  const int64_t B = ref.tokens.size(0), T = ref.tokens.size(1);
  auto pos = torch::arange(T, torch::kInt64).view({1, T}).expand({B, T});
  auto logits =
      (*model)->Logits((*model)->Hidden(ref.tokens, pos, torch::zeros({B, T}, torch::kInt64)));
  EXPECT_EQ(logits.scalar_type(), torch::kBFloat16);
  EXPECT_LT(RelativeError(logits, ref.logits), 0.05);
}

TEST_P(HfCrosscheckTest, SaveLoadRoundTripKeepsLogits) {
  const std::string dir = FixtureDir(GetParam());
  auto model = LoadHfModel(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  const std::string out = (std::filesystem::temp_directory_path() /
                           ("rlforge_cross_" + std::to_string(::getpid())) / GetParam())
                              .string();
  SaveHfOptions o;
  o.max_shard_bytes = 50 << 10;  // sharded on the way back
  ASSERT_TRUE(SaveHfModel(*model, out, o).ok());
  auto again = LoadHfModel(out);
  ASSERT_TRUE(again.ok()) << again.status();
  Reference ref = LoadReference(dir);
  torch::NoGradGuard g;
  const int64_t B = ref.tokens.size(0), T = ref.tokens.size(1);
  auto pos = torch::arange(T, torch::kInt64).view({1, T}).expand({B, T});
  auto seg = torch::zeros({B, T}, torch::kInt64);
  EXPECT_TRUE(torch::equal((*model)->Logits((*model)->Hidden(ref.tokens, pos, seg)),
                           (*again)->Logits((*again)->Hidden(ref.tokens, pos, seg))));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfCrosscheckTest,
                         ::testing::Values("llama_gqa", "qwen2_tied", "qwen3_tied", "qwen3_untied",
                                           "llama3_tied", "llama3_untied", "llama_linear",
                                           "qwen2_yarn", "qwen3_yarn", "llama_dynamic"));

// What the fixtures' config.json files say reaches the model.
TEST(HfCrosscheckConfigTest, FixturesParseToTheirRope) {
  auto qwen3 = LoadHfConfig(FixtureDir("qwen3_untied"));
  ASSERT_TRUE(qwen3.ok()) << qwen3.status();
  EXPECT_TRUE(qwen3->qk_norm());
  EXPECT_TRUE(qwen3->o_proj_bias());
  EXPECT_EQ(qwen3->head_dim, 24);
  auto llama3 = LoadHfConfig(FixtureDir("llama3_untied"));  // legacy rope_scaling
  ASSERT_TRUE(llama3.ok()) << llama3.status();
  EXPECT_EQ(llama3->rope_scaling.type, RopeType::kLlama3);
  EXPECT_EQ(llama3->rope_scaling.factor, 8.0);
  EXPECT_EQ(llama3->rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(llama3->rope_scaling.original_max_position_embeddings, 64);
  auto yarn = LoadHfConfig(FixtureDir("qwen3_yarn"));
  ASSERT_TRUE(yarn.ok()) << yarn.status();
  EXPECT_EQ(yarn->rope_scaling.type, RopeType::kYarn);
  EXPECT_EQ(yarn->rope_scaling.truncate, false);
  EXPECT_EQ(yarn->rope_scaling.mscale_all_dim, 1.0);
  auto legacy_yarn = LoadHfConfig(FixtureDir("qwen2_yarn"));  // {"type": "yarn"}
  ASSERT_TRUE(legacy_yarn.ok()) << legacy_yarn.status();
  EXPECT_EQ(legacy_yarn->rope_scaling.type, RopeType::kYarn);
  EXPECT_EQ(legacy_yarn->rope_scaling.factor, 4.0);
}

// The models HfExportTest writes: every architecture and RoPE type.
std::vector<std::pair<std::string, TransformerConfig>> ExportConfigs() {
  TransformerConfig base;
  base.vocab_size = 80;
  base.hidden_size = 48;
  base.intermediate_size = 80;
  base.num_hidden_layers = 2;
  base.num_attention_heads = 6;
  base.num_key_value_heads = 2;
  base.head_dim = 8;
  base.max_position_embeddings = 64;
  base.eos_token_id = 2;
  std::vector<std::pair<std::string, TransformerConfig>> out;
  TransformerConfig c = base;  // GQA, untied
  out.emplace_back("llama", c);
  c = base;  // qkv bias, tied, sharded
  c.architecture = "Qwen2ForCausalLM";
  c.num_key_value_heads = 3;
  c.rope_theta = 1e6;
  c.attention_bias = c.tie_word_embeddings = true;
  out.emplace_back("qwen2", c);
  c = base;  // q/k norms, head_dim != hidden / heads, all attention biases
  c.architecture = "Qwen3ForCausalLM";
  c.head_dim = 12;
  c.attention_bias = true;
  out.emplace_back("qwen3", c);
  c = base;
  c.tie_word_embeddings = true;
  c.rope_scaling.type = RopeType::kLlama3;
  c.rope_scaling.factor = 8;
  c.rope_scaling.low_freq_factor = 1;
  c.rope_scaling.high_freq_factor = 4;
  c.rope_scaling.original_max_position_embeddings = 32;
  out.emplace_back("llama3", c);
  c = base;
  c.architecture = "Qwen3ForCausalLM";
  c.rope_scaling.type = RopeType::kYarn;
  c.rope_scaling.factor = 4;
  c.rope_scaling.original_max_position_embeddings = 16;
  c.rope_scaling.beta_fast = 8;
  c.rope_scaling.mscale = 1;
  c.rope_scaling.mscale_all_dim = 0.5;
  c.rope_scaling.truncate = false;
  out.emplace_back("qwen3_yarn", c);
  c = base;
  c.rope_scaling.type = RopeType::kLinear;
  c.rope_scaling.factor = 3;
  out.emplace_back("llama_linear", c);
  c = base;  // 9 tokens past max_position_embeddings 6: scaled
  c.max_position_embeddings = 6;
  c.rope_scaling.type = RopeType::kDynamic;
  c.rope_scaling.factor = 2;
  out.emplace_back("llama_dynamic", c);
  return out;
}

// Writes rlforge-initialised models and their logits for tools/check_hf_roundtrip.py
// (which loads them in transformers). Into $RLFORGE_HF_EXPORT_DIR when set.
TEST(HfExportTest, WritesModelsForTransformersCheck) {
  const char* env = std::getenv("RLFORGE_HF_EXPORT_DIR");
  const std::string root = env ? env
                               : (std::filesystem::temp_directory_path() /
                                  ("rlforge_export_" + std::to_string(::getpid())))
                                     .string();
  torch::manual_seed(7);
  for (const auto& [name, c] : ExportConfigs()) {
    ASSERT_TRUE(ValidateConfig(c, name).ok()) << ValidateConfig(c, name);
    Transformer m(c, /*value_head=*/false);
    {
      torch::NoGradGuard g;
      for (auto& p : m->parameters()) p.normal_(0.0, 0.15);
    }
    const std::string dir = root + "/" + name;
    SaveHfOptions o;
    if (c.tie_word_embeddings) o.max_shard_bytes = 40 << 10;
    ASSERT_TRUE(SaveHfModel(m, dir, o).ok());
    torch::NoGradGuard g;
    auto tokens = torch::randint(80, {2, 9}, torch::kInt64);
    auto pos = torch::arange(9, torch::kInt64).view({1, 9}).expand({2, 9});
    auto logits = m->Logits(m->Hidden(tokens, pos, torch::zeros({2, 9}, torch::kInt64)));
    ASSERT_TRUE(WriteSafetensors(dir + "/rlforge_reference.safetensors",
                                 {{"tokens", tokens}, {"logits", logits}})
                    .ok());
    // What was saved loads back to the same logits here too.
    auto again = LoadHfModel(dir);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_TRUE(torch::equal(logits, (*again)->Logits((*again)->Hidden(
                                         tokens, pos, torch::zeros({2, 9}, torch::kInt64)))))
        << name;
  }
}

}  // namespace
}  // namespace rlforge::models
