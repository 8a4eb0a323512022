// config.json <-> TransformerConfig for LlamaForCausalLM, Qwen2ForCausalLM and Qwen3ForCausalLM.
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "models/transformer.h"
#include "nlohmann/json.hpp"

namespace rlforge::models {

namespace {

using nlohmann::json;

absl::Status KeyError(const std::string& origin, const std::string& key, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(origin, ": ", key, ": ", what));
}

// Reads an integer key; `required` keys must be present.
// `prefix` names the enclosing object in errors ("rope_scaling.").
absl::Status GetInt(const json& j, const std::string& origin, const std::string& key, bool required,
                    int64_t* out, const std::string& prefix = "") {
  if (!j.contains(key) || j[key].is_null()) {
    if (required) return KeyError(origin, prefix + key, "missing");
    return absl::OkStatus();
  }
  if (!j[key].is_number_integer()) {
    return KeyError(origin, prefix + key, absl::StrCat("expected an integer, got ", j[key].dump()));
  }
  *out = j[key].get<int64_t>();
  return absl::OkStatus();
}

absl::Status GetDouble(const json& j, const std::string& origin, const std::string& key,
                       double* out, const std::string& prefix = "") {
  if (!j.contains(key) || j[key].is_null()) return absl::OkStatus();
  if (!j[key].is_number()) {
    return KeyError(origin, prefix + key, absl::StrCat("expected a number, got ", j[key].dump()));
  }
  *out = j[key].get<double>();
  return absl::OkStatus();
}

absl::Status GetBool(const json& j, const std::string& origin, const std::string& key, bool* out,
                     const std::string& prefix = "") {
  if (!j.contains(key) || j[key].is_null()) return absl::OkStatus();
  if (!j[key].is_boolean()) {
    return KeyError(origin, prefix + key,
                    absl::StrCat("expected true or false, got ", j[key].dump()));
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

absl::Status GetOptionalDouble(const json& j, const std::string& origin, const std::string& key,
                               const std::string& prefix, std::optional<double>* out) {
  if (!j.contains(key) || j[key].is_null()) return absl::OkStatus();
  double v = 0;
  RETURN_IF_ERROR(GetDouble(j, origin, key, &v, prefix));
  *out = v;
  return absl::OkStatus();
}

// rope_type (or the older "type"): one this model implements.
absl::StatusOr<RopeType> ParseRopeType(const json& rp, const std::string& origin,
                                       const std::string& prefix) {
  const char* key = rp.contains("rope_type") ? "rope_type" : "type";
  if (!rp.contains(key) || rp[key].is_null()) return RopeType::kDefault;
  for (RopeType t : {RopeType::kDefault, RopeType::kLinear, RopeType::kDynamic, RopeType::kYarn,
                     RopeType::kLlama3}) {
    if (rp[key] == RopeTypeName(t)) return t;
  }
  return KeyError(origin, prefix + key,
                  absl::StrCat("unsupported RoPE type ", rp[key].dump(),
                               " (supported: default, linear, dynamic, yarn, llama3)"));
}

// The keys transformers reads for a RoPE type; any other key is an error, not ignored.
std::set<std::string> RopeKeys(RopeType type) {
  std::set<std::string> keys = {"rope_type", "type", "rope_theta", "partial_rotary_factor"};
  if (type != RopeType::kDefault) keys.insert("factor");
  if (type == RopeType::kYarn || type == RopeType::kLlama3) {
    keys.insert("original_max_position_embeddings");
  }
  if (type == RopeType::kLlama3) keys.insert({"low_freq_factor", "high_freq_factor"});
  if (type == RopeType::kYarn) {
    keys.insert(
        {"attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "truncate"});
  }
  return keys;
}

// Reads the fields of a yarn or llama3 rope dictionary (factor already read when given).
absl::Status ParseRopeContext(const json& rp, const json& top, const std::string& origin,
                              const std::string& prefix, TransformerConfig* c) {
  RopeScaling& s = c->rope_scaling;
  s.original_max_position_embeddings = c->max_position_embeddings;  // transformers' default
  RETURN_IF_ERROR(GetInt(rp, origin, "original_max_position_embeddings", false,
                         &s.original_max_position_embeddings, prefix));
  // A top-level value takes priority, as in transformers.
  RETURN_IF_ERROR(GetInt(top, origin, "original_max_position_embeddings", false,
                         &s.original_max_position_embeddings));
  if (s.type == RopeType::kLlama3) {
    for (auto [key, out] : {std::pair<const char*, double*>{"low_freq_factor", &s.low_freq_factor},
                            {"high_freq_factor", &s.high_freq_factor}}) {
      if (!rp.contains(key) || rp[key].is_null()) return KeyError(origin, prefix + key, "missing");
      RETURN_IF_ERROR(GetDouble(rp, origin, key, out, prefix));
    }
    return absl::OkStatus();
  }
  if (!rp.contains("factor") || rp["factor"].is_null()) {
    if (s.original_max_position_embeddings <= 0) {
      return KeyError(origin, prefix + "original_max_position_embeddings", "must be positive");
    }
    s.factor = static_cast<double>(c->max_position_embeddings) / s.original_max_position_embeddings;
  }
  for (auto [key, out] :
       {std::pair<const char*, std::optional<double>*>{"attention_factor", &s.attention_factor},
        {"beta_fast", &s.beta_fast},
        {"beta_slow", &s.beta_slow},
        {"mscale", &s.mscale},
        {"mscale_all_dim", &s.mscale_all_dim}}) {
    RETURN_IF_ERROR(GetOptionalDouble(rp, origin, key, prefix, out));
  }
  if (rp.contains("truncate") && !rp["truncate"].is_null()) {
    bool truncate = true;
    RETURN_IF_ERROR(GetBool(rp, origin, "truncate", &truncate, prefix));
    s.truncate = truncate;
  }
  return absl::OkStatus();
}

// One rope_scaling / rope_parameters dictionary, `key` naming it; `top` is the whole config.
absl::Status ParseRopeScaling(const json& rp, const json& top, const std::string& origin,
                              const std::string& key, TransformerConfig* c) {
  if (!rp.is_object()) return KeyError(origin, key, "expected an object");
  const std::string prefix = key + ".";
  ASSIGN_OR_RETURN(RopeType type, ParseRopeType(rp, origin, prefix));
  const std::set<std::string> allowed = RopeKeys(type);
  for (auto it = rp.begin(); it != rp.end(); ++it) {
    if (allowed.count(it.key()) == 0) {
      return KeyError(origin, prefix + it.key(),
                      absl::StrCat("not read for rope_type ", RopeTypeName(type),
                                   " (keys read: ", absl::StrJoin(allowed, ", "), ")"));
    }
  }
  RETURN_IF_ERROR(GetDouble(rp, origin, "rope_theta", &c->rope_theta, prefix));
  double partial = 1;
  RETURN_IF_ERROR(GetDouble(rp, origin, "partial_rotary_factor", &partial, prefix));
  if (partial != 1) {
    return KeyError(origin, prefix + "partial_rotary_factor",
                    absl::StrCat("only 1 (RoPE on the whole head) is supported, got ", partial));
  }
  c->rope_scaling = RopeScaling{};
  c->rope_scaling.type = type;
  if (type == RopeType::kDefault) return absl::OkStatus();
  if ((!rp.contains("factor") || rp["factor"].is_null()) && type != RopeType::kYarn) {
    return KeyError(origin, prefix + "factor", "missing");
  }
  RETURN_IF_ERROR(GetDouble(rp, origin, "factor", &c->rope_scaling.factor, prefix));
  if (type == RopeType::kLinear || type == RopeType::kDynamic) return absl::OkStatus();
  return ParseRopeContext(rp, top, origin, prefix, c);
}

// rope_theta, and rope_scaling or transformers-5's rope_parameters (which also holds
// rope_theta). transformers reads only rope_scaling when both are set: they must agree.
absl::Status ParseRope(const json& j, const std::string& origin, TransformerConfig* c) {
  RETURN_IF_ERROR(GetDouble(j, origin, "rope_theta", &c->rope_theta));
  auto given = [&](const char* key) {
    return j.contains(key) && !j[key].is_null() && !(j[key].is_object() && j[key].empty());
  };
  const bool scaling = given("rope_scaling"), parameters = given("rope_parameters");
  if (scaling && parameters) {
    json a = j["rope_scaling"], b = j["rope_parameters"];
    if (a.is_object()) a.erase("rope_theta");
    if (b.is_object()) b.erase("rope_theta");
    if (a != b) return KeyError(origin, "rope_scaling", "disagrees with rope_parameters");
  }
  if (scaling) {
    RETURN_IF_ERROR(ParseRopeScaling(j["rope_scaling"], j, origin, "rope_scaling", c));
    const json& p = j.contains("rope_parameters") ? j["rope_parameters"] : json();
    if (p.is_object() && p.contains("rope_theta") && p["rope_theta"] != c->rope_theta) {
      return KeyError(
          origin, "rope_parameters.rope_theta",
          absl::StrCat("disagrees with the rope_theta read with rope_scaling, ", c->rope_theta));
    }
  } else if (parameters) {
    RETURN_IF_ERROR(ParseRopeScaling(j["rope_parameters"], j, origin, "rope_parameters", c));
  }
  const RopeType type = c->rope_scaling.type;
  if (j.contains("original_max_position_embeddings") && type != RopeType::kYarn &&
      type != RopeType::kLlama3) {
    return KeyError(
        origin, "original_max_position_embeddings",
        absl::StrCat("only read with rope_type yarn or llama3, not ", RopeTypeName(type)));
  }
  double partial = 1;
  RETURN_IF_ERROR(GetDouble(j, origin, "partial_rotary_factor", &partial));
  if (partial != 1) {
    return KeyError(origin, "partial_rotary_factor",
                    absl::StrCat("only 1 (RoPE on the whole head) is supported, got ", partial));
  }
  return ValidateRopeScaling(c->rope_scaling, origin, scaling ? "rope_scaling" : "rope_parameters");
}

// The rope_scaling object transformers (4 and 5) reads back into the same RoPE; null for none.
json RopeScalingJson(const RopeScaling& s) {
  if (s.type == RopeType::kDefault) return nullptr;
  json r;
  r["rope_type"] = RopeTypeName(s.type);
  r["factor"] = s.factor;
  if (s.type == RopeType::kYarn || s.type == RopeType::kLlama3) {
    r["original_max_position_embeddings"] = s.original_max_position_embeddings;
  }
  if (s.type == RopeType::kLlama3) {
    r["low_freq_factor"] = s.low_freq_factor;
    r["high_freq_factor"] = s.high_freq_factor;
  }
  for (auto [key, v] : {std::pair<const char*, const std::optional<double>*>{"attention_factor",
                                                                             &s.attention_factor},
                        {"beta_fast", &s.beta_fast},
                        {"beta_slow", &s.beta_slow},
                        {"mscale", &s.mscale},
                        {"mscale_all_dim", &s.mscale_all_dim}}) {
    if (v->has_value()) r[key] = **v;
  }
  if (s.truncate) r["truncate"] = *s.truncate;
  return r;
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
  } else if (j.contains("model_type") && j["model_type"] == "qwen3") {
    c.architecture = "Qwen3ForCausalLM";
  } else {
    return KeyError(origin, "architectures",
                    "expected [\"LlamaForCausalLM\"], [\"Qwen2ForCausalLM\"] or "
                    "[\"Qwen3ForCausalLM\"]");
  }
  const bool qwen2 = c.architecture == "Qwen2ForCausalLM";
  const bool qwen3 = c.architecture == "Qwen3ForCausalLM";
  if (c.architecture != "LlamaForCausalLM" && !qwen2 && !qwen3) {
    return KeyError(
        origin, "architectures",
        absl::StrCat("unsupported architecture ", c.architecture,
                     " (supported: LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM)"));
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
  // transformers' defaults: Qwen3Config's head_dim is 128, not hidden_size / heads.
  c.head_dim = qwen3 ? 128 : c.num_attention_heads > 0 ? c.hidden_size / c.num_attention_heads : 0;
  if (auto s = GetInt(j, origin, "head_dim", false, &c.head_dim); !s.ok()) return s;
  c.max_position_embeddings = qwen2 || qwen3 ? 32768 : 2048;
  if (auto s = GetInt(j, origin, "max_position_embeddings", false, &c.max_position_embeddings);
      !s.ok())
    return s;
  if (auto s = GetDouble(j, origin, "rms_norm_eps", &c.rms_norm_eps); !s.ok()) return s;
  RETURN_IF_ERROR(ParseRope(j, origin, &c));
  if (j.contains("layer_types") && j["layer_types"].is_array()) {
    for (const auto& t : j["layer_types"]) {
      if (t != "full_attention") {
        return KeyError(origin, "layer_types",
                        absl::StrCat("only full_attention layers are supported, got ", t.dump()));
      }
    }
  }
  c.attention_bias = qwen2;  // Qwen2 always has qkv bias; Llama and Qwen3 read attention_bias
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
  if (j.contains("mlp_bias") && j["mlp_bias"] == true) {
    return KeyError(origin, "mlp_bias", "MLP bias is not supported");
  }
  if ((qwen2 || qwen3) && j.contains("use_sliding_window") && j["use_sliding_window"] == true) {
    return KeyError(origin, "use_sliding_window", "sliding-window attention is not supported");
  }
  if (auto s = ValidateConfig(c, origin); !s.ok()) return s;
  return c;
}

std::string WriteHfConfig(const TransformerConfig& c, const std::string& torch_dtype) {
  const bool qwen2 = c.architecture == "Qwen2ForCausalLM";
  const bool qwen3 = c.architecture == "Qwen3ForCausalLM";
  json j;
  j["architectures"] = {c.architecture};
  j["model_type"] = qwen2 ? "qwen2" : qwen3 ? "qwen3" : "llama";
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
  j["rope_scaling"] = RopeScalingJson(c.rope_scaling);
  j["attention_dropout"] = 0.0;
  if (qwen2 || qwen3) j["use_sliding_window"] = false;
  if (!qwen2) j["attention_bias"] = c.attention_bias;
  if (!qwen2 && !qwen3) j["mlp_bias"] = false;
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  if (c.eos_token_id >= 0) j["eos_token_id"] = c.eos_token_id;
  j["torch_dtype"] = torch_dtype;
  j["use_cache"] = true;
  return j.dump(2) + "\n";
}

}  // namespace rlforge::models
