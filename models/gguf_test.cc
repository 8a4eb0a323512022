// GgufFile and ImportGguf on GGUF files written here: a 2-layer llama with Q4_1, Q8_0, F16 and
// F32 tensors whose values are known, Q/K rows permuted as llama.cpp's converter does, and a
// byte-level BPE vocabulary. Then the errors: each names the file and the field or tensor, and
// leaves nothing in the output folder's parent.
#include "models/gguf.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "models/gguf_import.h"
#include "models/hf_checkpoint.h"
#include "models/tokenizer.h"

namespace rlforge::models {
namespace {

namespace fs = std::filesystem;

uint16_t FloatToHalf(float f) {  // exact for the values used here (small integers and halves)
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000;
  const int32_t exp = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
  if ((x & 0x7fffffff) == 0) return static_cast<uint16_t>(sign);
  return static_cast<uint16_t>(sign | (exp << 10) | ((x >> 13) & 0x3ff));
}

// A GGUF writer for tests: metadata, then tensors (data aligned to 32).
class GgufBuilder {
 public:
  void Str(const std::string& k, const std::string& v) { Key(k, 8), S(&meta_, v), ++kv_; }
  void U32(const std::string& k, uint32_t v) { Key(k, 4), Raw(&meta_, v), ++kv_; }
  void F32(const std::string& k, float v) { Key(k, 6), Raw(&meta_, v), ++kv_; }
  void Bool(const std::string& k, bool v) {
    Key(k, 7), Raw(&meta_, static_cast<uint8_t>(v)), ++kv_;
  }
  void Strs(const std::string& k, const std::vector<std::string>& v) {
    Key(k, 9), Raw(&meta_, uint32_t{8}), Raw(&meta_, uint64_t{v.size()});
    for (const auto& s : v) S(&meta_, s);
    ++kv_;
  }
  void I32s(const std::string& k, const std::vector<int32_t>& v) {
    Key(k, 9), Raw(&meta_, uint32_t{5}), Raw(&meta_, uint64_t{v.size()});
    for (int32_t x : v) Raw(&meta_, x);
    ++kv_;
  }
  // dims in GGML order (fastest first); `bytes` already encoded in `type`.
  void Tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type,
              const std::string& bytes) {
    while (data_.size() % 32) data_.push_back('\0');
    S(&infos_, name);
    Raw(&infos_, static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) Raw(&infos_, d);
    Raw(&infos_, type);
    Raw(&infos_, static_cast<uint64_t>(data_.size()));
    data_ += bytes;
    ++tensors_;
  }
  void Write(const std::string& path) const {
    std::string out = "GGUF";
    Raw(&out, uint32_t{3});
    Raw(&out, tensors_);
    Raw(&out, kv_);
    out += meta_ + infos_;
    while (out.size() % 32) out.push_back('\0');
    std::ofstream(path, std::ios::binary) << out << data_;
  }

 private:
  template <typename T>
  static void Raw(std::string* s, T v) {
    s->append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  static void S(std::string* s, const std::string& v) {
    Raw(s, uint64_t{v.size()});
    *s += v;
  }
  void Key(const std::string& k, uint32_t type) { S(&meta_, k), Raw(&meta_, type); }
  std::string meta_, infos_, data_;
  uint64_t kv_ = 0, tensors_ = 0;
};

std::string F32Bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

// Q4_1 blocks whose dequantized values are exactly d * q + m, q = (k * 7 + b) % 16.
std::string Q41Bytes(int64_t n, std::vector<float>* values) {
  std::string out;
  for (int64_t b = 0; b < n / 32; ++b) {
    const float d = 0.5f + static_cast<float>(b % 3), m = -1.0f - static_cast<float>(b % 2);
    uint16_t h = FloatToHalf(d);
    out.append(reinterpret_cast<const char*>(&h), 2);
    h = FloatToHalf(m);
    out.append(reinterpret_cast<const char*>(&h), 2);
    uint8_t q[32];
    for (int k = 0; k < 32; ++k) q[k] = static_cast<uint8_t>((k * 7 + b) % 16);
    for (int j = 0; j < 16; ++j) out.push_back(static_cast<char>(q[j] | (q[j + 16] << 4)));
    for (int k = 0; k < 32; ++k) values->push_back(d * q[k] + m);
  }
  return out;
}

// Q8_0 blocks: d * q, q = k - 16.
std::string Q80Bytes(int64_t n, std::vector<float>* values) {
  std::string out;
  for (int64_t b = 0; b < n / 32; ++b) {
    const float d = 0.25f * static_cast<float>(1 + b % 4);
    const uint16_t h = FloatToHalf(d);
    out.append(reinterpret_cast<const char*>(&h), 2);
    for (int k = 0; k < 32; ++k) {
      out.push_back(static_cast<char>(static_cast<int8_t>(k - 16)));
      values->push_back(d * static_cast<float>(k - 16));
    }
  }
  return out;
}

constexpr int64_t kHidden = 64, kFfn = 96, kHeads = 4, kKvHeads = 2, kLayers = 2;

struct TinyLlama {
  GgufBuilder g;
  std::map<std::string, std::vector<float>> hf;  // transformers' names and values
  std::vector<std::string> tokens;
};

// Byte-level BPE over "a".."z" with two merges; three control tokens first.
TinyLlama MakeTinyLlama(uint32_t embed_type = 8) {
  TinyLlama t;
  t.tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  for (char c = 'a'; c <= 'z'; ++c) t.tokens.push_back(std::string(1, c));
  t.tokens.push_back("\xc4\xa0");  // "Ġ": a space, byte-level
  t.tokens.push_back("ab");
  t.tokens.push_back(
      "\xc4\xa0"
      "ab");
  while (t.tokens.size() < 64) t.tokens.push_back("tok" + std::to_string(t.tokens.size()));
  const int64_t vocab = static_cast<int64_t>(t.tokens.size());
  GgufBuilder& g = t.g;
  g.Str("general.architecture", "llama");
  g.U32("llama.block_count", kLayers);
  g.U32("llama.context_length", 128);
  g.U32("llama.embedding_length", kHidden);
  g.U32("llama.feed_forward_length", kFfn);
  g.U32("llama.attention.head_count", kHeads);
  g.U32("llama.attention.head_count_kv", kKvHeads);
  g.F32("llama.rope.freq_base", 100000.0f);
  g.F32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  g.U32("llama.vocab_size", static_cast<uint32_t>(vocab));
  g.U32("llama.rope.dimension_count", kHidden / kHeads);
  g.Str("tokenizer.ggml.model", "gpt2");
  g.Str("tokenizer.ggml.pre", "smollm");
  g.Strs("tokenizer.ggml.tokens", t.tokens);
  std::vector<int32_t> types(t.tokens.size(), 1);
  types[0] = types[1] = types[2] = 3;
  g.I32s("tokenizer.ggml.token_type", types);
  g.Strs("tokenizer.ggml.merges", {"a b", "\xc4\xa0 ab"});
  g.U32("tokenizer.ggml.bos_token_id", 1);
  g.U32("tokenizer.ggml.eos_token_id", 2);
  g.U32("tokenizer.ggml.unknown_token_id", 0);
  g.U32("tokenizer.ggml.padding_token_id", 2);
  g.Bool("tokenizer.ggml.add_bos_token", false);
  g.Str("tokenizer.chat_template",
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}");
  auto add = [&](const std::string& gname, const std::string& hname, int64_t rows, int64_t cols,
                 uint32_t type, int64_t permute_heads = 0) {
    std::vector<float> v;
    std::string bytes;
    if (type == 3) {
      bytes = Q41Bytes(rows * cols, &v);
    } else if (type == 8) {
      bytes = Q80Bytes(rows * cols, &v);
    } else {
      for (int64_t k = 0; k < rows * cols; ++k)
        v.push_back(1.0f + 0.125f * static_cast<float>(k % 9));
      bytes = F32Bytes(v);
    }
    // The file holds the permuted rows; transformers' weight is their inverse.
    t.hf[hname] = permute_heads ? std::vector<float>() : v;
    if (permute_heads) {
      std::vector<float> hf(v.size());
      const int64_t d = rows / permute_heads / 2;
      for (int64_t h = 0; h < permute_heads; ++h)
        for (int64_t i = 0; i < d; ++i)
          for (int64_t j = 0; j < 2; ++j)
            std::copy_n(v.begin() + (h * 2 * d + 2 * i + j) * cols, cols,
                        hf.begin() + (h * 2 * d + j * d + i) * cols);
      t.hf[hname] = hf;
    }
    std::vector<uint64_t> dims = {static_cast<uint64_t>(cols)};
    if (rows > 1) dims.push_back(static_cast<uint64_t>(rows));
    g.Tensor(gname, dims, type, bytes);
  };
  add("token_embd.weight", "model.embed_tokens.weight", vocab, kHidden, embed_type);
  const int64_t head_dim = kHidden / kHeads;
  for (int64_t l = 0; l < kLayers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".",
                      h = "model.layers." + std::to_string(l) + ".";
    add(b + "attn_norm.weight", h + "input_layernorm.weight", 1, kHidden, 0);
    add(b + "attn_q.weight", h + "self_attn.q_proj.weight", kHidden, kHidden, 3, kHeads);
    add(b + "attn_k.weight", h + "self_attn.k_proj.weight", kKvHeads * head_dim, kHidden, 3,
        kKvHeads);
    add(b + "attn_v.weight", h + "self_attn.v_proj.weight", kKvHeads * head_dim, kHidden, 3);
    add(b + "attn_output.weight", h + "self_attn.o_proj.weight", kHidden, kHidden, 3);
    add(b + "ffn_norm.weight", h + "post_attention_layernorm.weight", 1, kHidden, 0);
    add(b + "ffn_gate.weight", h + "mlp.gate_proj.weight", kFfn, kHidden, 3);
    add(b + "ffn_up.weight", h + "mlp.up_proj.weight", kFfn, kHidden, 3);
    add(b + "ffn_down.weight", h + "mlp.down_proj.weight", kHidden, kFfn, 3);
  }
  add("output_norm.weight", "model.norm.weight", 1, kHidden, 0);
  return t;
}

std::string Fresh(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("gguf_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

// Nothing but the GGUF file in `dir`: no output folder, no partial one.
void ExpectOnlyTheGguf(const std::string& dir) {
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir)) left.push_back(e.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{"m.gguf"});
}

TEST(GgufTest, DequantizesQ41AsDTimesQPlusM) {
  std::vector<float> want;
  const std::string bytes = Q41Bytes(64, &want);
  std::vector<float> got(64);
  ASSERT_TRUE(DequantizeGgml(3, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), 64,
                             got.data())
                  .ok());
  EXPECT_EQ(got, want);
  // Block 1, element 17: d = 1.5, m = -2, q = (17 * 7 + 1) % 16 = 8.
  EXPECT_EQ(got[32 + 17], 1.5f * 8 - 2);
}

TEST(GgufTest, ImportsALlamaIntoAnHfDirectoryThatLoads) {
  const std::string dir = Fresh("import");
  TinyLlama t = MakeTinyLlama();
  t.g.Write(dir + "/m.gguf");
  const std::string out = dir + "/cache/tiny";
  ASSERT_TRUE(ImportGguf(dir + "/m.gguf", out).ok());
  auto model = LoadHfModel(out);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_TRUE((*model)->config().tie_word_embeddings);
  EXPECT_EQ((*model)->config().rope_theta, 100000.0);
  EXPECT_EQ((*model)->config().num_key_value_heads, kKvHeads);
  std::map<std::string, torch::Tensor> params;
  for (const auto& p : (*model)->named_parameters()) params[p.key()] = p.value();
  ASSERT_EQ(params.size(), t.hf.size());
  for (const auto& [name, want] : t.hf) {
    ASSERT_TRUE(params.count(name)) << name;
    const torch::Tensor got = params[name].contiguous().view(-1);
    ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size())) << name;
    EXPECT_TRUE(torch::equal(got, torch::tensor(want))) << name;
  }
  auto tok = LoadTokenizer(out);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->eos_id(), 2);
  // Special tokens whole; "ab" and " ab" merged.
  auto ids = (*tok)->Encode("<|im_start|>ab ab<|im_end|>");
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 30, 31, 2}));
  EXPECT_NE((*tok)->chat_template().find("<|im_start|>"), std::string::npos);
  EXPECT_TRUE(fs::exists(out + "/chat_template.jinja"));
  // Nothing but the checkpoint in the cache folder.
  std::vector<std::string> in_cache;
  for (const auto& e : fs::directory_iterator(dir + "/cache")) {
    in_cache.push_back(e.path().filename().string());
  }
  EXPECT_EQ(in_cache, std::vector<std::string>{"tiny"});
}

TEST(GgufTest, AnUnsupportedQuantisationNamesTheTensorAndLeavesNothing) {
  const std::string dir = Fresh("q6k");
  TinyLlama t = MakeTinyLlama(/*embed_type=*/14);  // Q6_K (its bytes are not checked first)
  t.g.Write(dir + "/m.gguf");
  absl::Status s = ImportGguf(dir + "/m.gguf", dir + "/out");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(dir + "/m.gguf: tensor token_embd.weight"), std::string::npos) << s;
  EXPECT_NE(s.message().find("Q6_K is not supported"), std::string::npos) << s;
  ExpectOnlyTheGguf(dir);
}

TEST(GgufTest, AnotherArchitectureOrAMissingFieldIsNamed) {
  const std::string dir = Fresh("arch");
  {
    TinyLlama t = MakeTinyLlama();
    t.g.Str("general.architecture", "gpt2");  // a second key of that name: the last one wins
    t.g.Write(dir + "/m.gguf");
  }
  absl::Status s = ImportGguf(dir + "/m.gguf", dir + "/out");
  EXPECT_NE(s.message().find("m.gguf: metadata general.architecture: 'gpt2' is not supported"),
            std::string::npos)
      << s;
  ExpectOnlyTheGguf(dir);

  GgufBuilder g;
  g.Str("general.architecture", "llama");
  g.Strs("tokenizer.ggml.tokens", {"a", "b"});
  g.Write(dir + "/m.gguf");
  s = ImportGguf(dir + "/m.gguf", dir + "/out");
  EXPECT_NE(s.message().find("m.gguf: metadata llama.block_count: missing"), std::string::npos)
      << s;
  ExpectOnlyTheGguf(dir);
}

TEST(GgufTest, ATruncatedFileOrAnExistingOutputIsAnError) {
  const std::string dir = Fresh("truncated");
  TinyLlama t = MakeTinyLlama();
  t.g.Write(dir + "/m.gguf");
  fs::resize_file(dir + "/m.gguf", fs::file_size(dir + "/m.gguf") - 100);
  absl::Status s = ImportGguf(dir + "/m.gguf", dir + "/out");
  EXPECT_NE(s.message().find("runs past the end of the file"), std::string::npos) << s;
  ExpectOnlyTheGguf(dir);

  t.g.Write(dir + "/m.gguf");
  fs::create_directory(dir + "/out");
  s = ImportGguf(dir + "/m.gguf", dir + "/out");
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists) << s;
  EXPECT_TRUE(fs::is_empty(dir + "/out"));
}

}  // namespace
}  // namespace rlforge::models
