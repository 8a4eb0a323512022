#include "models/gguf_import.h"

#include <unistd.h>

#include <filesystem>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/exceptions.h"
#include "common/status.h"
#include "models/gguf.h"
#include "models/safetensors.h"
#include "models/transformer.h"
#include "nlohmann/json.hpp"

namespace rlforge::models {

namespace {

namespace fs = std::filesystem;
// Sorted keys (std::map): a 49k-entry vocabulary is built in O(n log n).
using Json = nlohmann::json;

// llama.cpp's token types (llama_token_type).
constexpr int64_t kTokenControl = 3;
constexpr int64_t kTokenUserDefined = 4;

absl::Status FieldError(const GgufFile& f, const std::string& key, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(f.path(), ": metadata ", key, ": ", what));
}

absl::StatusOr<int64_t> IntOr(const GgufFile& f, const std::string& key, int64_t fallback) {
  return f.Has(key) ? f.Int(key) : absl::StatusOr<int64_t>(fallback);
}

absl::StatusOr<TransformerConfig> ReadConfig(const GgufFile& f, int64_t n_tokens) {
  ASSIGN_OR_RETURN(const std::string arch, f.String("general.architecture"));
  if (arch != "llama") {
    return FieldError(f, "general.architecture",
                      absl::StrCat("'", arch, "' is not supported (supported: llama)"));
  }
  TransformerConfig c;
  c.architecture = "LlamaForCausalLM";
  ASSIGN_OR_RETURN(c.num_hidden_layers, f.Int("llama.block_count"));
  ASSIGN_OR_RETURN(c.hidden_size, f.Int("llama.embedding_length"));
  ASSIGN_OR_RETURN(c.intermediate_size, f.Int("llama.feed_forward_length"));
  ASSIGN_OR_RETURN(c.num_attention_heads, f.Int("llama.attention.head_count"));
  ASSIGN_OR_RETURN(c.num_key_value_heads,
                   IntOr(f, "llama.attention.head_count_kv", c.num_attention_heads));
  ASSIGN_OR_RETURN(c.max_position_embeddings, f.Int("llama.context_length"));
  ASSIGN_OR_RETURN(c.rms_norm_eps, f.Float("llama.attention.layer_norm_rms_epsilon"));
  c.rope_theta = 10000;
  if (f.Has("llama.rope.freq_base")) {
    ASSIGN_OR_RETURN(c.rope_theta, f.Float("llama.rope.freq_base"));
  }
  ASSIGN_OR_RETURN(c.vocab_size, IntOr(f, "llama.vocab_size", n_tokens));
  if (c.num_attention_heads <= 0 || c.hidden_size % c.num_attention_heads != 0) {
    return FieldError(
        f, "llama.attention.head_count",
        absl::StrCat(c.num_attention_heads, " does not divide hidden size ", c.hidden_size));
  }
  c.head_dim = c.hidden_size / c.num_attention_heads;
  if (f.Has("llama.attention.key_length")) {
    ASSIGN_OR_RETURN(c.head_dim, f.Int("llama.attention.key_length"));
  }
  ASSIGN_OR_RETURN(const int64_t rope_dims, IntOr(f, "llama.rope.dimension_count", c.head_dim));
  if (rope_dims != c.head_dim) {
    return FieldError(
        f, "llama.rope.dimension_count",
        absl::StrCat(rope_dims, " (partial rotary) is not supported; head dim is ", c.head_dim));
  }
  for (const char* key : {"llama.rope.scaling.type", "llama.rope.scaling.factor"}) {
    if (f.Has(key)) {
      const auto type = f.String("llama.rope.scaling.type");
      if (!type.ok() || *type != "none") {
        return FieldError(f, key, "RoPE scaling is not supported by this importer");
      }
    }
  }
  if (n_tokens != c.vocab_size) {
    return FieldError(f, "tokenizer.ggml.tokens",
                      absl::StrCat(n_tokens, " tokens, but llama.vocab_size is ", c.vocab_size));
  }
  ASSIGN_OR_RETURN(c.bos_token_id, IntOr(f, "tokenizer.ggml.bos_token_id", -1));
  ASSIGN_OR_RETURN(c.eos_token_id, IntOr(f, "tokenizer.ggml.eos_token_id", -1));
  c.tie_word_embeddings = f.FindTensor("output.weight") == nullptr;
  RETURN_IF_ERROR(ValidateConfig(c, f.path()));
  return c;
}

// GGUF tensor name -> transformers' name; empty when the name is not a llama tensor.
std::string HfName(const std::string& g) {
  static const std::pair<const char*, const char*> kTop[] = {
      {"token_embd.weight", "model.embed_tokens.weight"},
      {"output_norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"}};
  for (const auto& [from, to] : kTop) {
    if (g == from) return to;
  }
  static const std::pair<const char*, const char*> kBlock[] = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_output.weight", "self_attn.o_proj.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"}};
  if (!absl::StartsWith(g, "blk.")) return "";
  const size_t dot = g.find('.', 4);
  if (dot == std::string::npos) return "";
  const std::string layer = g.substr(4, dot - 4), rest = g.substr(dot + 1);
  if (layer.empty() || layer.find_first_not_of("0123456789") != std::string::npos) return "";
  for (const auto& [from, to] : kBlock) {
    if (rest == from) return absl::StrCat("model.layers.", layer, ".", to);
  }
  return "";
}

// llama.cpp's converter interleaves the two rotary halves of every head's rows of q_proj and
// k_proj (row h*2d + 2i + j holds transformers' row h*2d + j*d + i); this undoes it.
std::vector<float> UnpermuteRows(const std::vector<float>& w, int64_t rows, int64_t cols,
                                 int64_t heads) {
  std::vector<float> out(w.size());
  const int64_t d = rows / heads / 2;
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < d; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t from = h * 2 * d + 2 * i + j, to = h * 2 * d + j * d + i;
        std::copy_n(w.begin() + from * cols, cols, out.begin() + to * cols);
      }
    }
  }
  return out;
}

absl::Status WriteWeights(const GgufFile& f, const TransformerConfig& c, const std::string& dir) {
  // Every tensor transformers' LlamaForCausalLM expects, and nothing else.
  std::set<std::string> expected = {"model.embed_tokens.weight", "model.norm.weight"};
  if (!c.tie_word_embeddings) expected.insert("lm_head.weight");
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    for (const char* n :
         {"input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_proj.weight",
          "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
          "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"}) {
      expected.insert(absl::StrCat("model.layers.", l, ".", n));
    }
  }
  std::vector<SafetensorSpec> specs;
  std::vector<const GgufTensorInfo*> sources;
  for (const GgufTensorInfo& t : f.tensors()) {
    const std::string name = HfName(t.name);
    if (name.empty() || expected.count(name) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(f.path(), ": tensor ", t.name, " is not part of a ", c.num_hidden_layers,
                       "-layer llama model (unsupported by this importer)"));
    }
    expected.erase(name);
    specs.push_back({name, torch::kFloat32, t.shape()});
    sources.push_back(&t);
  }
  if (!expected.empty()) {
    return absl::NotFoundError(absl::StrCat(f.path(), ": missing tensor for ", *expected.begin(),
                                            " (and ", expected.size() - 1, " more)"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsWriter> writer,
                   SafetensorsWriter::Create(dir + "/model.safetensors", specs));
  for (size_t k = 0; k < specs.size(); ++k) {
    const GgufTensorInfo& t = *sources[k];
    ASSIGN_OR_RETURN(std::vector<float> values, f.Dequantize(t.name));
    const std::vector<int64_t> shape = t.shape();
    const bool q = absl::EndsWith(t.name, "attn_q.weight"),
               kp = absl::EndsWith(t.name, "attn_k.weight");
    if (q || kp) {
      const int64_t heads = q ? c.num_attention_heads : c.num_key_value_heads;
      if (shape.size() != 2 || shape[0] % (2 * heads) != 0) {
        return absl::InvalidArgumentError(absl::StrCat(f.path(), ": tensor ", t.name, " has ",
                                                       shape[0], " rows, not a multiple of 2 x ",
                                                       heads, " heads"));
      }
      values = UnpermuteRows(values, shape[0], shape[1], heads);
    }
    RETURN_IF_ERROR(CallCatching([&] {
      return writer->Write(
          specs[k].name, 0,
          torch::from_blob(values.data(), {static_cast<int64_t>(values.size())}, torch::kFloat32));
    }));
  }
  return writer->Finish();
}

// tokenizer.json of a byte-level BPE (GPT-2 style) tokenizer, as Hugging Face's tokenizers
// library writes it.
absl::StatusOr<std::string> TokenizerJson(const GgufFile& f,
                                          const std::vector<std::string>& tokens) {
  ASSIGN_OR_RETURN(const std::string model, f.String("tokenizer.ggml.model"));
  if (model != "gpt2") {
    return FieldError(
        f, "tokenizer.ggml.model",
        absl::StrCat("'", model, "' is not supported (supported: gpt2, byte-level BPE)"));
  }
  ASSIGN_OR_RETURN(const std::vector<std::string> merges, f.Strings("tokenizer.ggml.merges"));
  ASSIGN_OR_RETURN(const std::vector<int64_t> types, f.Ints("tokenizer.ggml.token_type"));
  if (types.size() != tokens.size()) {
    return FieldError(f, "tokenizer.ggml.token_type",
                      absl::StrCat(types.size(), " entries for ", tokens.size(), " tokens"));
  }
  std::string pre = "default";
  if (f.Has("tokenizer.ggml.pre")) {
    ASSIGN_OR_RETURN(pre, f.String("tokenizer.ggml.pre"));
  }
  const Json byte_level = {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", true},
                           {"use_regex", true}};
  Json pre_tokenizer;
  if (pre == "smollm") {  // llama.cpp's smollm: single digits, then GPT-2's split
    pre_tokenizer = {
        {"type", "Sequence"},
        {"pretokenizers",
         Json::array({{{"type", "Digits"}, {"individual_digits", true}}, byte_level})}};
  } else if (pre == "default" || pre == "gpt2" || pre == "gpt-2") {
    pre_tokenizer = byte_level;
  } else {
    return FieldError(f, "tokenizer.ggml.pre",
                      absl::StrCat("pre-tokenizer '", pre,
                                   "' is not supported (supported: smollm, gpt2, default)"));
  }
  Json added = Json::array();
  Json vocab = Json::object();
  std::set<std::string> seen;
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (!seen.insert(tokens[id]).second) {
      return FieldError(f, "tokenizer.ggml.tokens",
                        absl::StrCat("token ", id, " '", tokens[id], "' appears twice"));
    }
    vocab[tokens[id]] = id;
    if (types[id] == kTokenControl || types[id] == kTokenUserDefined) {
      added.push_back({{"id", id},
                       {"content", tokens[id]},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", types[id] == kTokenControl}});
    }
  }
  Json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = std::move(added);
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = std::move(pre_tokenizer);
  j["post_processor"] = {{"type", "ByteLevel"},
                         {"add_prefix_space", true},
                         {"trim_offsets", false},
                         {"use_regex", true}};
  j["decoder"] = {{"type", "ByteLevel"},
                  {"add_prefix_space", true},
                  {"trim_offsets", true},
                  {"use_regex", true}};
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", ""},
                {"end_of_word_suffix", ""},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", std::move(vocab)},
                {"merges", merges}};
  return j.dump(1) + "\n";
}

// tokenizer_config.json: the special tokens by name, and the chat template.
absl::StatusOr<std::string> TokenizerConfigJson(const GgufFile& f,
                                                const std::vector<std::string>& tokens) {
  Json j;
  auto name = [&](const char* key, const char* as) -> absl::Status {
    if (!f.Has(key)) return absl::OkStatus();
    ASSIGN_OR_RETURN(const int64_t id, f.Int(key));
    if (id < 0 || id >= static_cast<int64_t>(tokens.size())) {
      return FieldError(f, key,
                        absl::StrCat(id, " is not a token id (", tokens.size(), " tokens)"));
    }
    j[as] = tokens[static_cast<size_t>(id)];
    return absl::OkStatus();
  };
  if (!f.Has("tokenizer.ggml.eos_token_id")) {
    return absl::NotFoundError(
        absl::StrCat(f.path(), ": metadata tokenizer.ggml.eos_token_id: missing"));
  }
  RETURN_IF_ERROR(name("tokenizer.ggml.bos_token_id", "bos_token"));
  RETURN_IF_ERROR(name("tokenizer.ggml.eos_token_id", "eos_token"));
  RETURN_IF_ERROR(name("tokenizer.ggml.unknown_token_id", "unk_token"));
  RETURN_IF_ERROR(name("tokenizer.ggml.padding_token_id", "pad_token"));
  bool add_bos = false;
  if (f.Has("tokenizer.ggml.add_bos_token")) {
    ASSIGN_OR_RETURN(add_bos, f.Bool("tokenizer.ggml.add_bos_token"));
  }
  j["add_bos_token"] = add_bos;
  j["add_eos_token"] = false;
  j["clean_up_tokenization_spaces"] = false;
  j["model_max_length"] = f.Has("llama.context_length") ? *f.Int("llama.context_length") : 2048;
  j["tokenizer_class"] = "GPT2Tokenizer";
  if (f.Has("tokenizer.chat_template")) {
    ASSIGN_OR_RETURN(std::string t, f.String("tokenizer.chat_template"));
    j["chat_template"] = std::move(t);
  }
  return j.dump(2) + "\n";
}

absl::Status WriteAll(const GgufFile& f, const std::string& dir) {
  ASSIGN_OR_RETURN(const std::vector<std::string> tokens, f.Strings("tokenizer.ggml.tokens"));
  ASSIGN_OR_RETURN(const TransformerConfig config,
                   ReadConfig(f, static_cast<int64_t>(tokens.size())));
  ASSIGN_OR_RETURN(const std::string tokenizer, TokenizerJson(f, tokens));
  ASSIGN_OR_RETURN(const std::string tokenizer_config, TokenizerConfigJson(f, tokens));
  RETURN_IF_ERROR(WriteWeights(f, config, dir));
  RETURN_IF_ERROR(WriteFileAtomic(dir + "/tokenizer.json", tokenizer));
  RETURN_IF_ERROR(WriteFileAtomic(dir + "/tokenizer_config.json", tokenizer_config));
  if (f.Has("tokenizer.chat_template")) {
    ASSIGN_OR_RETURN(const std::string t, f.String("tokenizer.chat_template"));
    RETURN_IF_ERROR(WriteFileAtomic(dir + "/chat_template.jinja", t));
  }
  return WriteFileAtomic(dir + "/config.json", WriteHfConfig(config, "float32"));
}

}  // namespace

absl::Status ImportGguf(const std::string& gguf_path, const std::string& out_dir) {
  std::error_code ec;
  const fs::path out = fs::absolute(out_dir, ec);
  if (ec || out.filename().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(out_dir, ": not a usable folder name"));
  }
  if (fs::exists(out, ec)) {
    return absl::AlreadyExistsError(
        absl::StrCat(out.string(), " already exists; remove it to import again"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(gguf_path));
  fs::create_directories(out.parent_path(), ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat(out.parent_path().string(), ": cannot create: ", ec.message()));
  }
  // A sibling, so the final rename stays on one file system.
  const fs::path tmp =
      out.parent_path() / absl::StrCat(".", out.filename().string(), ".partial-", getpid());
  fs::remove_all(tmp, ec);
  fs::create_directory(tmp, ec);
  if (ec) return absl::InternalError(absl::StrCat(tmp.string(), ": cannot create: ", ec.message()));
  absl::Status s = WriteAll(*file, tmp.string());
  if (s.ok()) {
    fs::rename(tmp, out, ec);
    if (ec) {
      s = absl::InternalError(
          absl::StrCat("cannot rename ", tmp.string(), " to ", out.string(), ": ", ec.message()));
    } else {
      s = SyncParentDirectory(out.string());
    }
  }
  if (!s.ok()) fs::remove_all(tmp, ec);
  return s;
}

}  // namespace rlforge::models
