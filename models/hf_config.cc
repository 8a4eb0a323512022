// config.json <-> TransformerConfig for LlamaForCausalLM and Qwen2ForCausalLM.
#include "absl/strings/str_cat.h"
#include "models/transformer.h"
#include "nlohmann/json.hpp"

namespace rlforge::models {

namespace {

using nlohmann::json;

absl::Status KeyError(const std::string& origin, const std::string& key, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(origin, ": ", key, ": ", what));
}

// Reads an integer key; `required` keys must be present.
absl::Status GetInt(const json& j, const std::string& origin, const std::string& key, bool required,
                    int64_t* out) {
  if (!j.contains(key) || j[key].is_null()) {
    if (required) return KeyError(origin, key, "missing");
    return absl::OkStatus();
  }
  if (!j[key].is_number_integer()) {
    return KeyError(origin, key, absl::StrCat("expected an integer, got ", j[key].dump()));
  }
  *out = j[key].get<int64_t>();
  return absl::OkStatus();
}

absl::Status GetDouble(const json& j, const std::string& origin, const std::string& key,
                       double* out) {
  if (!j.contains(key) || j[key].is_null()) return absl::OkStatus();
  if (!j[key].is_number()) {
    return KeyError(origin, key, absl::StrCat("expected a number, got ", j[key].dump()));
  }
  *out = j[key].get<double>();
  return absl::OkStatus();
}

absl::Status GetBool(const json& j, const std::string& origin, const std::string& key, bool* out) {
  if (!j.contains(key) || j[key].is_null()) return absl::OkStatus();
  if (!j[key].is_boolean()) {
    return KeyError(origin, key, absl::StrCat("expected true or false, got ", j[key].dump()));
  }
  *out = j[key].get<bool>();
  return absl::OkStatus();
}

// bos/eos may be an integer or a list of integers (the first is used).
absl::Status GetTokenId(const json& j, const std::string& origin, const std::string& key,
                        int64_t* out) {
  if (!j.contains(key) || j[key].is_null()) return absl::OkStatus();
  const json& v = j[key];
  if (v.is_array() && !v.empty() && v[0].is_number_integer()) {
    *out = v[0].get<int64_t>();
    return absl::OkStatus();
  }
  if (!v.is_number_integer()) {
    return KeyError(origin, key, absl::StrCat("expected a token id, got ", v.dump()));
  }
  *out = v.get<int64_t>();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TransformerConfig> ParseHfConfig(const std::string& text,
                                                const std::string& origin) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": not a JSON object"));
  }
  TransformerConfig c;
  if (j.contains("architectures") && j["architectures"].is_array() &&
      j["architectures"].size() == 1 && j["architectures"][0].is_string()) {
    c.architecture = j["architectures"][0].get<std::string>();
  } else if (j.contains("model_type") && j["model_type"] == "llama") {
    c.architecture = "LlamaForCausalLM";
  } else if (j.contains("model_type") && j["model_type"] == "qwen2") {
    c.architecture = "Qwen2ForCausalLM";
  } else {
    return KeyError(origin, "architectures",
                    "expected [\"LlamaForCausalLM\"] or [\"Qwen2ForCausalLM\"]");
  }
  const bool qwen2 = c.architecture == "Qwen2ForCausalLM";
  if (c.architecture != "LlamaForCausalLM" && !qwen2) {
    return KeyError(origin, "architectures",
                    absl::StrCat("unsupported architecture ", c.architecture,
                                 " (supported: LlamaForCausalLM, Qwen2ForCausalLM)"));
  }
  for (auto [key, out] : {std::pair<const char*, int64_t*>{"vocab_size", &c.vocab_size},
                          {"hidden_size", &c.hidden_size},
                          {"intermediate_size", &c.intermediate_size},
                          {"num_hidden_layers", &c.num_hidden_layers},
                          {"num_attention_heads", &c.num_attention_heads}}) {
    if (auto s = GetInt(j, origin, key, true, out); !s.ok()) return s;
  }
  c.num_key_value_heads = c.num_attention_heads;
  if (auto s = GetInt(j, origin, "num_key_value_heads", false, &c.num_key_value_heads); !s.ok())
    return s;
  c.head_dim = c.num_attention_heads > 0 ? c.hidden_size / c.num_attention_heads : 0;
  if (auto s = GetInt(j, origin, "head_dim", false, &c.head_dim); !s.ok()) return s;
  c.max_position_embeddings = qwen2 ? 32768 : 2048;  // transformers' defaults
  if (auto s = GetInt(j, origin, "max_position_embeddings", false, &c.max_position_embeddings);
      !s.ok())
    return s;
  if (auto s = GetDouble(j, origin, "rope_theta", &c.rope_theta); !s.ok()) return s;
  if (auto s = GetDouble(j, origin, "rms_norm_eps", &c.rms_norm_eps); !s.ok()) return s;
  // transformers >= 5 writes {"rope_parameters": {"rope_theta": .., "rope_type": "default"}}.
  if (j.contains("rope_parameters") && !j["rope_parameters"].is_null()) {
    const json& rp = j["rope_parameters"];
    if (!rp.is_object()) return KeyError(origin, "rope_parameters", "expected an object");
    if (rp.contains("rope_type") && rp["rope_type"] != "default") {
      return KeyError(origin, "rope_parameters.rope_type",
                      absl::StrCat("only default RoPE is supported, got ", rp["rope_type"].dump()));
    }
    if (auto s = GetDouble(rp, origin, "rope_theta", &c.rope_theta); !s.ok()) return s;
  }
  if (j.contains("layer_types") && j["layer_types"].is_array()) {
    for (const auto& t : j["layer_types"]) {
      if (t != "full_attention") {
        return KeyError(origin, "layer_types",
                        absl::StrCat("only full_attention layers are supported, got ", t.dump()));
      }
    }
  }
  c.attention_bias = qwen2;  // Qwen2 always has qkv bias; Llama reads attention_bias
  if (!qwen2) {
    if (auto s = GetBool(j, origin, "attention_bias", &c.attention_bias); !s.ok()) return s;
  }
  if (auto s = GetBool(j, origin, "tie_word_embeddings", &c.tie_word_embeddings); !s.ok()) return s;
  if (auto s = GetTokenId(j, origin, "bos_token_id", &c.bos_token_id); !s.ok()) return s;
  if (auto s = GetTokenId(j, origin, "eos_token_id", &c.eos_token_id); !s.ok()) return s;

  // Features not implemented here: refuse rather than compute something else.
  if (j.contains("hidden_act") && j["hidden_act"] != "silu") {
    return KeyError(origin, "hidden_act",
                    absl::StrCat("only silu is supported, got ", j["hidden_act"].dump()));
  }
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    return KeyError(origin, "rope_scaling", "RoPE scaling is not supported");
  }
  if (j.contains("mlp_bias") && j["mlp_bias"] == true) {
    return KeyError(origin, "mlp_bias", "MLP bias is not supported");
  }
  if (qwen2 && j.contains("use_sliding_window") && j["use_sliding_window"] == true) {
    return KeyError(origin, "use_sliding_window", "sliding-window attention is not supported");
  }
  if (auto s = ValidateConfig(c, origin); !s.ok()) return s;
  return c;
}

std::string WriteHfConfig(const TransformerConfig& c, const std::string& torch_dtype) {
  const bool qwen2 = c.architecture == "Qwen2ForCausalLM";
  json j;
  j["architectures"] = {c.architecture};
  j["model_type"] = qwen2 ? "qwen2" : "llama";
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_dim;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rope_theta"] = c.rope_theta;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["hidden_act"] = "silu";
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["rope_scaling"] = nullptr;
  j["attention_dropout"] = 0.0;
  if (qwen2) {
    j["use_sliding_window"] = false;
  } else {
    j["attention_bias"] = c.attention_bias;
    j["mlp_bias"] = false;
  }
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  if (c.eos_token_id >= 0) j["eos_token_id"] = c.eos_token_id;
  j["torch_dtype"] = torch_dtype;
  j["use_cache"] = true;
  return j.dump(2) + "\n";
}

}  // namespace rlforge::models
