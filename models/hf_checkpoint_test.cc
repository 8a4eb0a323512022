#include "models/hf_checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "models/safetensors.h"

namespace rlforge::models {
namespace {

namespace fs = std::filesystem;

std::string TempDir(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("rlforge_hf_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

TransformerConfig Tiny(bool qwen) {
  TransformerConfig c;
  c.architecture = qwen ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
  c.vocab_size = 40;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = qwen ? 4 : 2;
  c.head_dim = 4;
  c.max_position_embeddings = 32;
  c.attention_bias = qwen;
  c.tie_word_embeddings = qwen;
  c.eos_token_id = 3;
  return c;
}

torch::Tensor Logits(Transformer& m, const torch::Tensor& tokens) {
  torch::NoGradGuard g;
  int64_t T = tokens.size(1);
  auto pos = torch::arange(T, torch::kInt64).view({1, T}).expand_as(tokens);
  return m->Logits(m->Hidden(tokens, pos, torch::zeros_like(tokens))).to(torch::kFloat32);
}

void ExpectSameParameters(const Transformer& a, const Transformer& b) {
  auto pa = a->named_parameters();
  auto pb = b->named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (const auto& p : pa) {
    ASSERT_TRUE(pb.contains(p.key())) << p.key();
    EXPECT_TRUE(torch::equal(p.value(), pb[p.key()])) << p.key();
  }
}

TEST(HfCheckpointTest, SaveLoadRoundTripSingleFile) {
  for (bool qwen : {false, true}) {
    Transformer m(Tiny(qwen), /*value_head=*/!qwen);
    const std::string dir = TempDir(qwen ? "qwen" : "llama");
    ASSERT_TRUE(SaveHfModel(m, dir).ok());
    EXPECT_TRUE(fs::exists(dir + "/model.safetensors"));
    EXPECT_TRUE(fs::exists(dir + "/config.json"));
    auto loaded = LoadHfModel(dir);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ((*loaded)->has_value_head(), !qwen);
    EXPECT_EQ((*loaded)->config().eos_token_id, 3);
    ExpectSameParameters(m, *loaded);
    auto tokens = torch::randint(40, {2, 5}, torch::kInt64);
    EXPECT_TRUE(torch::equal(Logits(m, tokens), Logits(*loaded, tokens)));
  }
}

TEST(HfCheckpointTest, ShardedSaveWritesIndexAndLoadsBack) {
  Transformer m(Tiny(false));
  const std::string dir = TempDir("sharded");
  SaveHfOptions o;
  o.max_shard_bytes = 8 << 10;
  ASSERT_TRUE(SaveHfModel(m, dir, o).ok());
  EXPECT_FALSE(fs::exists(dir + "/model.safetensors"));
  EXPECT_TRUE(fs::exists(dir + "/model.safetensors.index.json"));
  EXPECT_TRUE(fs::exists(dir + "/model-00001-of-00003.safetensors") ||
              fs::exists(dir + "/model-00001-of-00002.safetensors") ||
              fs::exists(dir + "/model-00001-of-00004.safetensors"));
  auto loaded = LoadHfModel(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectSameParameters(m, *loaded);
  // Saving again unsharded removes the shards.
  ASSERT_TRUE(SaveHfModel(m, dir).ok());
  EXPECT_FALSE(fs::exists(dir + "/model.safetensors.index.json"));
  ASSERT_TRUE(LoadHfModel(dir).ok());
}

TEST(HfCheckpointTest, Bf16SaveAndLoad) {
  Transformer m(Tiny(true));
  m->to(torch::kBFloat16);
  const std::string dir = TempDir("bf16");
  ASSERT_TRUE(SaveHfModel(m, dir).ok());
  auto f = SafetensorsFile::Open(dir + "/model.safetensors");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ((*f)->Info("model.norm.weight")->dtype, "BF16");
  auto as_bf16 = LoadHfModel(dir, torch::kBFloat16);
  ASSERT_TRUE(as_bf16.ok()) << as_bf16.status();
  ExpectSameParameters(m, *as_bf16);
  auto as_f32 = LoadHfModel(dir, torch::kFloat32);
  ASSERT_TRUE(as_f32.ok()) << as_f32.status();
  EXPECT_EQ((*as_f32)->named_parameters()[0].value().scalar_type(), torch::kFloat32);
}

TEST(HfCheckpointTest, MissingUnexpectedAndMisshapenTensorsAreErrors) {
  Transformer m(Tiny(false));
  const std::string dir = TempDir("bad");
  ASSERT_TRUE(SaveHfModel(m, dir).ok());
  auto params = m->named_parameters();
  auto rewrite = [&](std::vector<std::pair<std::string, torch::Tensor>> tensors) {
    ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors", tensors).ok());
  };
  auto all = [&] {
    std::vector<std::pair<std::string, torch::Tensor>> v;
    for (const auto& p : params) v.emplace_back(p.key(), p.value());
    return v;
  };
  auto expect = [&](const std::string& needle) {
    auto r = LoadHfModel(dir);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(std::string(r.status().message()).find(needle), std::string::npos)
        << r.status().message();
  };
  auto v = all();
  v.erase(v.begin() + 3);
  const std::string dropped = all()[3].first;
  rewrite(v);
  expect(dropped);

  v = all();
  v.emplace_back("model.layers.0.extra.weight", torch::ones({2}));
  rewrite(v);
  expect("model.layers.0.extra.weight");

  v = all();
  v[0].second = torch::zeros({3, 3});
  rewrite(v);
  expect("shape");

  // Transformers' old inv_freq buffers are tolerated.
  v = all();
  v.emplace_back("model.layers.0.self_attn.rotary_emb.inv_freq", torch::ones({2}));
  rewrite(v);
  EXPECT_TRUE(LoadHfModel(dir).ok());

  fs::remove(dir + "/model.safetensors");
  expect("model.safetensors");
}

}  // namespace
}  // namespace rlforge::models
