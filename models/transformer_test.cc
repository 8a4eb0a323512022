#include "models/transformer.h"

#include <gtest/gtest.h>

#include <set>

namespace rlforge::models {
namespace {

TransformerConfig Tiny(const std::string& arch) {
  TransformerConfig c;
  c.architecture = arch;
  c.vocab_size = 37;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = 64;
  c.attention_bias = arch == "Qwen2ForCausalLM";
  c.tie_word_embeddings = arch == "Qwen2ForCausalLM";
  return c;
}

torch::Tensor Arange(int64_t n) { return torch::arange(n, torch::kInt64); }

// A model's parameter names, and its number of values in `count`.
std::set<std::string> ParameterNames(const Transformer& m, int64_t* count) {
  std::set<std::string> names;
  *count = 0;
  for (const auto& p : m->named_parameters()) {
    names.insert(p.key());
    *count += p.value().numel();
  }
  return names;
}

TEST(TransformerTest, ParameterNamesAreHuggingFaces) {
  Transformer llama(Tiny("LlamaForCausalLM"), /*value_head=*/true);
  std::set<std::string> names;
  for (const auto& p : llama->named_parameters()) names.insert(p.key());
  for (const char* n :
       {"model.embed_tokens.weight", "model.layers.0.input_layernorm.weight",
        "model.layers.1.self_attn.q_proj.weight", "model.layers.1.self_attn.k_proj.weight",
        "model.layers.1.self_attn.v_proj.weight", "model.layers.1.self_attn.o_proj.weight",
        "model.layers.0.post_attention_layernorm.weight", "model.layers.0.mlp.gate_proj.weight",
        "model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.down_proj.weight",
        "model.norm.weight", "lm_head.weight", "value_head.weight", "value_head.bias"}) {
    EXPECT_TRUE(names.count(n)) << n;
  }
  EXPECT_EQ(names.count("model.layers.0.self_attn.q_proj.bias"), 0u);

  Transformer qwen(Tiny("Qwen2ForCausalLM"));
  int64_t count = 0;
  names = ParameterNames(qwen, &count);
  EXPECT_TRUE(names.count("model.layers.0.self_attn.q_proj.bias"));
  EXPECT_TRUE(names.count("model.layers.0.self_attn.v_proj.bias"));
  EXPECT_EQ(names.count("model.layers.0.self_attn.o_proj.bias"), 0u);
  EXPECT_EQ(names.count("lm_head.weight"), 0u);
  EXPECT_EQ(count, ParameterCount(qwen->config()));
}

TEST(TransformerTest, PackedForwardEqualsSeparateForwards) {
  torch::manual_seed(1);
  Transformer m(Tiny("LlamaForCausalLM"));
  auto a = torch::randint(37, {5}, torch::kInt64), b = torch::randint(37, {7}, torch::kInt64);
  auto la = m->Logits(
      m->Hidden(a.view({1, 5}), Arange(5).view({1, 5}), torch::zeros({1, 5}, torch::kInt64)));
  auto lb = m->Logits(
      m->Hidden(b.view({1, 7}), Arange(7).view({1, 7}), torch::zeros({1, 7}, torch::kInt64)));
  // One row: a, b, then 2 padding tokens.
  auto tokens = torch::cat({a, b, torch::zeros({2}, torch::kInt64)}).view({1, 14});
  auto pos = torch::cat({Arange(5), Arange(7), torch::zeros({2}, torch::kInt64)}).view({1, 14});
  auto seg = torch::cat({torch::zeros({5}, torch::kInt64), torch::ones({7}, torch::kInt64),
                         torch::full({2}, -1, torch::kInt64)})
                 .view({1, 14});
  auto packed = m->Logits(m->Hidden(tokens, pos, seg));
  EXPECT_TRUE(torch::allclose(packed.narrow(1, 0, 5), la, 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(packed.narrow(1, 5, 7), lb, 1e-5, 1e-5));
  EXPECT_FALSE(torch::isnan(packed).any().item<bool>());
}

TEST(TransformerTest, IncrementalWithContiguousCacheReproducesFullForward) {
  torch::manual_seed(2);
  for (const char* arch : {"LlamaForCausalLM", "Qwen2ForCausalLM"}) {
    Transformer m(Tiny(arch));
    torch::NoGradGuard g;
    const int64_t T = 9;
    auto seqs = torch::randint(37, {2, T}, torch::kInt64);
    auto full = m->Logits(m->Hidden(seqs, Arange(T).view({1, T}).expand({2, T}),
                                    torch::zeros({2, T}, torch::kInt64)));
    // Per sequence, per layer: contiguous caches. Sequence 0 prefills 3 tokens, sequence 1
    // prefills 1; then both step one token at a time, batched.
    std::vector<std::vector<torch::Tensor>> kc(2, std::vector<torch::Tensor>(2)),
        vc(2, std::vector<torch::Tensor>(2));
    std::vector<int64_t> done = {0, 0};
    auto step = [&](const std::vector<int64_t>& counts) {
      std::vector<torch::Tensor> tok, pos;
      for (int s = 0; s < 2; ++s) {
        tok.push_back(seqs[s].narrow(0, done[s], counts[s]));
        pos.push_back(Arange(counts[s]) + done[s]);
      }
      auto attend = [&](int64_t layer, const torch::Tensor& q, const torch::Tensor& k,
                        const torch::Tensor& v) {
        std::vector<torch::Tensor> outs;
        int64_t off = 0;
        for (int s = 0; s < 2; ++s) {
          auto ks = k.narrow(0, off, counts[s]), vs = v.narrow(0, off, counts[s]);
          auto& K = kc[s][layer];
          auto& V = vc[s][layer];
          K = K.defined() ? torch::cat({K, ks}) : ks;
          V = V.defined() ? torch::cat({V, vs}) : vs;
          outs.push_back(m->ContiguousAttention(q.narrow(0, off, counts[s]), K, V));
          off += counts[s];
        }
        return torch::cat(outs);
      };
      auto logits = m->Logits(m->HiddenIncremental(torch::cat(tok), torch::cat(pos), attend));
      int64_t off = 0;
      for (int s = 0; s < 2; ++s) {
        auto want = full[s].narrow(0, done[s], counts[s]);
        EXPECT_TRUE(torch::allclose(logits.narrow(0, off, counts[s]), want, 1e-4, 1e-5))
            << arch << " seq " << s << " at " << done[s];
        off += counts[s];
        done[s] += counts[s];
      }
    };
    step({3, 1});
    while (done[1] < T - 2) step({done[0] < T ? 1 : 0, 1});
  }
}

TEST(TransformerTest, Bf16ForwardTracksFp32) {
  torch::manual_seed(3);
  Transformer m(Tiny("Qwen2ForCausalLM"));
  auto tokens = torch::randint(37, {2, 6}, torch::kInt64);
  auto pos = Arange(6).view({1, 6}).expand({2, 6});
  auto seg = torch::zeros({2, 6}, torch::kInt64);
  torch::NoGradGuard g;
  auto ref = m->Logits(m->Hidden(tokens, pos, seg));
  m->to(torch::kBFloat16);
  auto got = m->Logits(m->Hidden(tokens, pos, seg));
  EXPECT_EQ(got.scalar_type(), torch::kBFloat16);
  EXPECT_LT((got.to(torch::kFloat32) - ref).abs().max().item<float>(),
            0.05 * ref.abs().max().item<float>() + 1e-3);
}

TEST(TransformerTest, BackwardReachesEveryParameter) {
  Transformer m(Tiny("LlamaForCausalLM"), /*value_head=*/true);
  auto tokens = torch::randint(37, {2, 6}, torch::kInt64);
  auto h =
      m->Hidden(tokens, Arange(6).view({1, 6}).expand({2, 6}), torch::zeros({2, 6}, torch::kInt64));
  (m->Logits(h).logsumexp(-1).sum() + m->Values(h).sum()).backward();
  for (const auto& p : m->named_parameters()) {
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    EXPECT_GT(p.value().grad().abs().sum().item<float>(), 0) << p.key();
  }
}

TEST(HfConfigTest, ParsesLlamaAndQwen2) {
  auto llama = ParseHfConfig(R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 100,
      "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
      "num_attention_heads": 8, "num_key_value_heads": 2, "rope_theta": 500000.0,
      "rms_norm_eps": 1e-5, "eos_token_id": [7, 8], "hidden_act": "silu"})",
                             "llama.json");
  ASSERT_TRUE(llama.ok()) << llama.status();
  EXPECT_EQ(llama->head_dim, 8);
  EXPECT_EQ(llama->num_key_value_heads, 2);
  EXPECT_EQ(llama->rope_theta, 500000.0);
  EXPECT_EQ(llama->eos_token_id, 7);
  EXPECT_FALSE(llama->attention_bias);
  EXPECT_FALSE(llama->tie_word_embeddings);

  auto qwen = ParseHfConfig(R"({"architectures": ["Qwen2ForCausalLM"], "vocab_size": 100,
      "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
      "num_attention_heads": 4, "tie_word_embeddings": true})",
                            "qwen.json");
  ASSERT_TRUE(qwen.ok()) << qwen.status();
  EXPECT_TRUE(qwen->attention_bias);
  EXPECT_TRUE(qwen->tie_word_embeddings);
  EXPECT_EQ(qwen->num_key_value_heads, 4);

  // transformers >= 5 nests rope_theta.
  auto v5 = ParseHfConfig(R"({"architectures": ["Qwen2ForCausalLM"], "vocab_size": 100,
      "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
      "num_attention_heads": 4, "layer_types": ["full_attention", "full_attention"],
      "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"}})",
                          "v5.json");
  ASSERT_TRUE(v5.ok()) << v5.status();
  EXPECT_EQ(v5->rope_theta, 1e6);

  // Written configs parse back to the same thing.
  auto again = ParseHfConfig(WriteHfConfig(*llama, "float32"), "written");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->rope_theta, llama->rope_theta);
  EXPECT_EQ(again->num_key_value_heads, 2);
  EXPECT_EQ(again->eos_token_id, 7);
}

TEST(HfConfigTest, ParsesQwen3WithTransformersDefaults) {
  auto qwen3 = ParseHfConfig(R"({"model_type": "qwen3", "vocab_size": 100, "hidden_size": 64,
      "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 2})",
                             "qwen3.json");
  ASSERT_TRUE(qwen3.ok()) << qwen3.status();
  EXPECT_EQ(qwen3->architecture, "Qwen3ForCausalLM");
  EXPECT_EQ(qwen3->head_dim, 128);  // Qwen3Config's default, not hidden_size / heads
  EXPECT_EQ(qwen3->max_position_embeddings, 32768);
  EXPECT_FALSE(qwen3->attention_bias);
  EXPECT_TRUE(qwen3->qk_norm());
  Transformer m(*qwen3);
  int64_t count = 0;
  std::set<std::string> names = ParameterNames(m, &count);
  EXPECT_TRUE(names.count("model.layers.1.self_attn.q_norm.weight"));
  EXPECT_TRUE(names.count("model.layers.1.self_attn.k_norm.weight"));
  EXPECT_EQ(count, ParameterCount(m->config()));
}

TEST(HfConfigTest, RopeScalingWritesBackAsRead) {
  const std::string base = R"("architectures": ["LlamaForCausalLM"], "vocab_size": 100,
      "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
      "num_attention_heads": 8, "max_position_embeddings": 1024, "rope_theta": 500000.0)";
  for (const std::string rope :
       {R"("rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 256})",
        R"("rope_scaling": {"type": "linear", "factor": 2.0})",
        R"("rope_parameters": {"rope_type": "dynamic", "factor": 3.0, "rope_theta": 1e4})",
        R"("rope_scaling": {"type": "yarn", "factor": 4.0, "beta_fast": 16.0,
            "mscale": 1.0, "mscale_all_dim": 0.5, "truncate": false})",
        R"("rope_parameters": {"rope_type": "yarn", "original_max_position_embeddings": 256,
            "attention_factor": 0.9, "beta_slow": 2.0})"}) {
    auto c = ParseHfConfig("{" + base + ", " + rope + "}", "rope.json");
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_NE(c->rope_scaling.type, RopeType::kDefault) << rope;
    auto again = ParseHfConfig(WriteHfConfig(*c, "float32"), "written");
    ASSERT_TRUE(again.ok()) << again.status();
    const RopeScaling &a = c->rope_scaling, &b = again->rope_scaling;
    EXPECT_EQ(again->rope_theta, c->rope_theta) << rope;
    EXPECT_EQ(b.type, a.type);
    EXPECT_EQ(b.factor, a.factor) << rope;
    EXPECT_EQ(b.original_max_position_embeddings, a.original_max_position_embeddings) << rope;
    EXPECT_EQ(b.low_freq_factor, a.low_freq_factor);
    EXPECT_EQ(b.high_freq_factor, a.high_freq_factor);
    EXPECT_EQ(b.attention_factor, a.attention_factor);
    EXPECT_EQ(b.beta_fast, a.beta_fast);
    EXPECT_EQ(b.beta_slow, a.beta_slow);
    EXPECT_EQ(b.mscale, a.mscale);
    EXPECT_EQ(b.mscale_all_dim, a.mscale_all_dim);
    EXPECT_EQ(b.truncate, a.truncate);
  }
  // YaRN without a factor takes max_position_embeddings / original_max_position_embeddings.
  auto yarn = ParseHfConfig("{" + base +
                                R"(, "rope_parameters": {"rope_type": "yarn",
                                   "original_max_position_embeddings": 256}})",
                            "yarn.json");
  ASSERT_TRUE(yarn.ok()) << yarn.status();
  EXPECT_EQ(yarn->rope_scaling.factor, 4.0);
}

TEST(HfConfigTest, ErrorsNameTheKey) {
  const std::string base = R"("vocab_size": 100, "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 2, "num_attention_heads": 8)";
  auto expect_error = [&](const std::string& json, const std::string& needle) {
    auto r = ParseHfConfig(json, "cfg.json");
    ASSERT_FALSE(r.ok()) << json;
    EXPECT_NE(std::string(r.status().message()).find(needle), std::string::npos)
        << r.status().message();
    EXPECT_NE(std::string(r.status().message()).find("cfg.json"), std::string::npos);
  };
  expect_error(R"({"architectures": ["GPT2LMHeadModel"], )" + base + "}", "GPT2LMHeadModel");
  expect_error(R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 100})", "hidden_size");
  expect_error(R"({"architectures": ["LlamaForCausalLM"], )" + base +
                   R"(, "rope_scaling": {"type": "longrope", "factor": 2.0}})",
               "rope_scaling.type: unsupported RoPE type \"longrope\"");
  expect_error(R"({"architectures": ["LlamaForCausalLM"], )" + base +
                   R"(, "rope_scaling": {"rope_type": "linear", "factor": 2.0, "beta_fast": 3}})",
               "rope_scaling.beta_fast: not read for rope_type linear");
  expect_error(R"({"architectures": ["LlamaForCausalLM"], )" + base +
                   R"(, "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
                      "high_freq_factor": 4.0}})",
               "rope_scaling.low_freq_factor: missing");
  expect_error(R"({"architectures": ["LlamaForCausalLM"], )" + base +
                   R"(, "rope_parameters": {"rope_type": "dynamic"}})",
               "rope_parameters.factor: missing");
  expect_error(R"({"architectures": ["LlamaForCausalLM"], )" + base +
                   R"(, "rope_scaling": {"rope_type": "linear", "factor": -2.0}})",
               "rope_scaling.factor: expected a positive number");
  expect_error(R"({"architectures": ["LlamaForCausalLM"], )" + base +
                   R"(, "rope_scaling": {"rope_type": "linear", "factor": 2.0},
                      "rope_parameters": {"rope_type": "linear", "factor": 4.0}})",
               "rope_scaling: disagrees with rope_parameters");
  expect_error(R"({"architectures": ["LlamaForCausalLM"], )" + base +
                   R"(, "rope_scaling": {"rope_type": "linear", "factor": 2.0},
                      "rope_parameters": {"rope_type": "linear", "factor": 2.0,
                                          "rope_theta": 5e5}})",
               "rope_parameters.rope_theta: disagrees");
  expect_error(
      R"({"architectures": ["LlamaForCausalLM"], )" + base +
          R"(, "rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.5}})",
      "rope_parameters.partial_rotary_factor");
  expect_error(
      R"({"architectures": ["Qwen3ForCausalLM"], )" + base + R"(, "use_sliding_window": true})",
      "use_sliding_window");
  expect_error(R"({"architectures": ["LlamaForCausalLM"], )" + base + R"(, "hidden_act": "gelu"})",
               "hidden_act");
  expect_error(
      R"({"architectures": ["LlamaForCausalLM"], )" + base + R"(, "num_key_value_heads": 3})",
      "num_key_value_heads");
  expect_error(R"({"architectures": ["LlamaForCausalLM"], )" + base + R"(, "hidden_size": "x"})",
               "hidden_size");
  expect_error(R"({"architectures": ["LlamaForCausalLM"], )" + base +
                   R"(, "rope_parameters": {"rope_type": "longrope", "factor": 4.0}})",
               "rope_parameters.rope_type");
  expect_error("not json", "not a JSON object");
}

}  // namespace
}  // namespace rlforge::models
