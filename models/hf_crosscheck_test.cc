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
};

Reference LoadReference(const std::string& dir) {
  auto f = SafetensorsFile::Open(dir + "/reference.safetensors");
  EXPECT_TRUE(f.ok()) << f.status();
  if (!f.ok()) return {};
  return {*(*f)->Read("tokens"), *(*f)->Read("logits")};
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
    EXPECT_LT(RelativeError(logits[0], ref.logits[0][t]), 1e-4) << "position " << t;
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

INSTANTIATE_TEST_SUITE_P(Fixtures, HfCrosscheckTest, ::testing::Values("llama_gqa", "qwen2_tied"));

// Writes rlforge-initialised models and their logits for tools/check_hf_roundtrip.py
// (which loads them in transformers). Into $RLFORGE_HF_EXPORT_DIR when set.
TEST(HfExportTest, WritesModelsForTransformersCheck) {
  const char* env = std::getenv("RLFORGE_HF_EXPORT_DIR");
  const std::string root = env ? env
                               : (std::filesystem::temp_directory_path() /
                                  ("rlforge_export_" + std::to_string(::getpid())))
                                     .string();
  torch::manual_seed(7);
  for (bool qwen : {false, true}) {
    TransformerConfig c;
    c.architecture = qwen ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
    c.vocab_size = 80;
    c.hidden_size = 48;
    c.intermediate_size = 80;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 6;
    c.num_key_value_heads = qwen ? 3 : 2;
    c.head_dim = 8;
    c.max_position_embeddings = 64;
    c.rope_theta = qwen ? 1e6 : 1e4;
    c.attention_bias = qwen;
    c.tie_word_embeddings = qwen;
    c.eos_token_id = 2;
    Transformer m(c, /*value_head=*/false);
    {
      torch::NoGradGuard g;
      for (auto& p : m->parameters()) p.normal_(0.0, 0.15);
    }
    const std::string dir = root + (qwen ? "/qwen2" : "/llama");
    SaveHfOptions o;
    if (qwen) o.max_shard_bytes = 40 << 10;
    ASSERT_TRUE(SaveHfModel(m, dir, o).ok());
    torch::NoGradGuard g;
    auto tokens = torch::randint(80, {2, 9}, torch::kInt64);
    auto pos = torch::arange(9, torch::kInt64).view({1, 9}).expand({2, 9});
    auto logits = m->Logits(m->Hidden(tokens, pos, torch::zeros({2, 9}, torch::kInt64)));
    ASSERT_TRUE(WriteSafetensors(dir + "/rlforge_reference.safetensors",
                                 {{"tokens", tokens}, {"logits", logits}})
                    .ok());
  }
}

}  // namespace
}  // namespace rlforge::models
