#include "models/lora.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/atomic_file.h"
#include "common/status.h"
#include "models/hf_checkpoint.h"
#include "models/safetensors.h"
#include "nlohmann/json.hpp"

namespace rlforge::models {

namespace {

constexpr char kPeftPrefix[] = "base_model.model.";

// "model.layers.3.self_attn.q_proj" -> "q_proj"
std::string LastPart(const std::string& name) {
  const size_t dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(dot + 1);
}

bool IsLayerProjection(const std::string& module_name) {
  return absl::StartsWith(module_name, "model.layers.") &&
         (absl::StrContains(module_name, ".self_attn.") || absl::StrContains(module_name, ".mlp."));
}

}  // namespace

const std::vector<std::string>& LoraTargetModules() {
  static const std::vector<std::string> kModules = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                    "gate_proj", "up_proj", "down_proj"};
  return kModules;
}

LoraSpec LoraSpecOf(const LoraOptions& o) {
  return LoraSpec{o.rank, o.alpha, o.dropout, o.target_modules};
}

absl::Status AddLora(Transformer& model, const LoraSpec& spec, bool in_forward) {
  if (spec.rank <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("lora rank: expected > 0, got ", spec.rank));
  }
  if (spec.target_modules.empty()) return absl::InvalidArgumentError("lora: no target modules");
  const auto& known = LoraTargetModules();
  for (const std::string& t : spec.target_modules) {
    if (std::find(known.begin(), known.end(), t) == known.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "lora target module '", t, "': expected one of ", absl::StrJoin(known, ", ")));
    }
  }
  if (model->has_adapters()) return absl::FailedPreconditionError("the model has adapters already");
  for (const auto& item : model->named_modules()) {
    const std::string& name = item.key();
    auto* linear = dynamic_cast<torch::nn::LinearImpl*>(item.value().get());
    if (linear == nullptr || !IsLayerProjection(name)) continue;
    const std::string part = LastPart(name);
    if (std::find(spec.target_modules.begin(), spec.target_modules.end(), part) ==
        spec.target_modules.end()) {
      continue;
    }
    const int64_t in = linear->weight.size(1), out = linear->weight.size(0);
    TransformerImpl::LoraAdapter a;
    // torch's Linear init is kaiming_uniform_(a=sqrt(5)), peft's for lora_A; lora_B starts 0.
    a.a = linear->register_module(
        "lora_A", torch::nn::Linear(torch::nn::LinearOptions(in, spec.rank).bias(false)));
    a.b = linear->register_module(
        "lora_B", torch::nn::Linear(torch::nn::LinearOptions(spec.rank, out).bias(false)));
    {
      torch::NoGradGuard ng;
      a.a->weight.set_data(a.a->weight.to(linear->weight.options()));
      a.b->weight.set_data(torch::zeros({out, spec.rank}, linear->weight.options()));
    }
    a.scale = spec.scale();
    a.dropout = spec.dropout;
    if (in_forward) model->AttachAdapter(linear, a);
  }
  return absl::OkStatus();
}

bool IsLoraParameter(const std::string& name) {
  return absl::StrContains(name, ".lora_A.") || absl::StrContains(name, ".lora_B.");
}

void FreezeBase(Transformer& model) {
  for (auto& p : model->named_parameters()) p.value().set_requires_grad(IsLoraParameter(p.key()));
}

std::vector<std::pair<std::string, torch::Tensor>> LoraParameters(const Transformer& model) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& p : model->named_parameters()) {
    if (IsLoraParameter(p.key())) out.emplace_back(p.key(), p.value());
  }
  return out;
}

std::string PeftTensorName(const std::string& name) { return kPeftPrefix + name; }

absl::Status SavePeftAdapter(const Transformer& model, const LoraSpec& spec,
                             const std::string& base_model, const std::string& dir) {
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& [name, t] : LoraParameters(model)) {
    tensors.emplace_back(PeftTensorName(name), t.detach().to(torch::kCPU, torch::kFloat32));
  }
  if (tensors.empty()) return absl::FailedPreconditionError("the model has no adapters to save");
  nlohmann::json c = {{"peft_type", "LORA"},
                      {"task_type", "CAUSAL_LM"},
                      {"base_model_name_or_path", base_model},
                      {"r", spec.rank},
                      {"lora_alpha", spec.alpha},
                      {"lora_dropout", spec.dropout},
                      {"target_modules", spec.target_modules},
                      {"bias", "none"},
                      {"fan_in_fan_out", false},
                      {"inference_mode", true},
                      {"init_lora_weights", true},
                      {"use_rslora", false},
                      {"use_dora", false},
                      {"modules_to_save", nullptr}};
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(dir, ": cannot create: ", ec.message()));
  RETURN_IF_ERROR(
      WriteSafetensors(dir + "/adapter_model.safetensors", tensors, {{"format", "pt"}}));
  return WriteFileAtomic(dir + "/adapter_config.json", c.dump(2) + "\n");
}

absl::StatusOr<LoraSpec> ReadPeftConfig(const std::string& dir) {
  const std::string path = dir + "/adapter_config.json";
  ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path));
  const nlohmann::json c = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!c.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  auto bad = [&](const std::string& key, const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", key, ": ", why));
  };
  if (c.value("peft_type", "") != "LORA") return bad("peft_type", "expected \"LORA\"");
  if (!c.contains("r") || !c["r"].is_number_integer()) return bad("r", "expected an integer");
  LoraSpec s;
  s.rank = c["r"].get<int64_t>();
  if (s.rank <= 0) return bad("r", absl::StrCat("expected > 0, got ", s.rank));
  if (!c.contains("lora_alpha") || !c["lora_alpha"].is_number()) {
    return bad("lora_alpha", "expected a number");
  }
  s.alpha = c["lora_alpha"].get<double>();
  s.dropout = c.value("lora_dropout", 0.0);
  if (!c.contains("target_modules") || !c["target_modules"].is_array()) {
    return bad("target_modules", "expected a list of module names");
  }
  for (const auto& t : c["target_modules"]) {
    if (!t.is_string()) return bad("target_modules", "expected a list of module names");
    s.target_modules.push_back(t.get<std::string>());
  }
  if (c.value("bias", "none") != "none") return bad("bias", "only \"none\" is supported");
  for (const char* flag : {"use_dora", "use_rslora", "fan_in_fan_out"}) {
    if (c.contains(flag) && c[flag].is_boolean() && c[flag].get<bool>()) {
      return bad(flag, "not supported (expected false)");
    }
  }
  return s;
}

absl::StatusOr<LoraSpec> LoadPeftAdapter(Transformer& model, const std::string& dir) {
  ASSIGN_OR_RETURN(const LoraSpec spec, ReadPeftConfig(dir));
  RETURN_IF_ERROR(AddLora(model, spec));
  const std::string path = dir + "/adapter_model.safetensors";
  ASSIGN_OR_RETURN(const std::unique_ptr<SafetensorsFile> file, SafetensorsFile::Open(path));
  const auto params = LoraParameters(model);
  if (file->names().size() != params.size()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": holds ", file->names().size(),
                                                   " tensors, the config implies ", params.size()));
  }
  torch::NoGradGuard ng;
  for (const auto& [name, p] : params) {
    const std::string key = PeftTensorName(name);
    if (!file->contains(key)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": missing tensor ", key));
    }
    ASSIGN_OR_RETURN(torch::Tensor t, file->Read(key));
    if (t.sizes() != p.sizes()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": ", key, ": shape ", c10::str(t.sizes()), ", expected ", c10::str(p.sizes())));
    }
    p.copy_(t);
  }
  return spec;
}

absl::Status MergeAdapters(Transformer& model,
                           const std::vector<std::pair<std::string, torch::Tensor>>& adapters,
                           double scale) {
  std::map<std::string, torch::Tensor> by_name(adapters.begin(), adapters.end());
  std::map<std::string, torch::Tensor> weights;
  for (auto& p : model->named_parameters()) weights[p.key()] = p.value();
  torch::NoGradGuard ng;
  for (const auto& [name, a] : by_name) {
    if (!absl::EndsWith(name, ".lora_A.weight")) continue;
    const std::string proj = name.substr(0, name.size() - std::string(".lora_A.weight").size());
    const auto b = by_name.find(proj + ".lora_B.weight");
    const auto w = weights.find(proj + ".weight");
    if (b == by_name.end()) return absl::InvalidArgumentError(absl::StrCat(proj, ": no lora_B"));
    if (w == weights.end()) {
      return absl::InvalidArgumentError(absl::StrCat(proj, ": no such projection in the model"));
    }
    const torch::Tensor delta =
        torch::matmul(b->second.to(torch::kFloat32), a.to(torch::kFloat32)) * scale;
    if (delta.sizes() != w->second.sizes()) {
      return absl::InvalidArgumentError(absl::StrCat(proj, ": adapter shape ",
                                                     c10::str(delta.sizes()), " != weight ",
                                                     c10::str(w->second.sizes())));
    }
    w->second.add_(delta.to(w->second.options()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> MergeLoraCheckpoint(const std::string& adapter_dir,
                                                const std::string& base_dir,
                                                const std::string& out_dir) {
  ASSIGN_OR_RETURN(const LoraSpec spec, ReadPeftConfig(adapter_dir));
  std::string base = base_dir;
  if (base.empty()) {
    ASSIGN_OR_RETURN(const std::string text,
                     ReadFileToString(adapter_dir + "/adapter_config.json"));
    base = nlohmann::json::parse(text, nullptr, false).value("base_model_name_or_path", "");
    if (base.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          adapter_dir, "/adapter_config.json: base_model_name_or_path is empty: pass --base"));
    }
  }
  if (std::filesystem::exists(out_dir)) {
    return absl::AlreadyExistsError(absl::StrCat(out_dir, ": exists; name a new directory"));
  }
  ASSIGN_OR_RETURN(Transformer model, LoadHfModel(base));
  const std::string path = adapter_dir + "/adapter_model.safetensors";
  ASSIGN_OR_RETURN(const std::unique_ptr<SafetensorsFile> file, SafetensorsFile::Open(path));
  std::vector<std::pair<std::string, torch::Tensor>> adapters;
  for (const std::string& name : file->names()) {
    if (!absl::StartsWith(name, kPeftPrefix) || !IsLoraParameter(name)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": unexpected tensor ", name));
    }
    ASSIGN_OR_RETURN(torch::Tensor t, file->Read(name));
    adapters.emplace_back(name.substr(std::string(kPeftPrefix).size()), t);
  }
  RETURN_IF_ERROR(MergeAdapters(model, adapters, spec.scale()));
  const absl::Status saved = SaveHfModel(model, out_dir);
  if (!saved.ok()) std::filesystem::remove_all(out_dir);
  RETURN_IF_ERROR(saved);
  return base;
}

absl::StatusOr<std::unique_ptr<MergedLora>> MergedLora::Create(Transformer& model,
                                                               const LoraSpec& spec) {
  RETURN_IF_ERROR(AddLora(model, spec, /*in_forward=*/false));
  std::unique_ptr<MergedLora> m(new MergedLora());
  m->scale_ = spec.scale();
  for (const auto& item : model->named_modules()) {
    auto* linear = dynamic_cast<torch::nn::LinearImpl*>(item.value().get());
    if (linear == nullptr) continue;
    const auto children = linear->named_children();
    if (!children.contains("lora_A")) continue;
    auto* a = dynamic_cast<torch::nn::LinearImpl*>(children["lora_A"].get());
    auto* b = dynamic_cast<torch::nn::LinearImpl*>(children["lora_B"].get());
    m->targets_.push_back({linear->weight, linear->weight.detach().clone(), a->weight, b->weight});
    m->adapter_elements_ += a->weight.numel() + b->weight.numel();
  }
  return m;
}

void MergedLora::Merge() {
  torch::NoGradGuard ng;
  for (Target& t : targets_) {
    t.weight.copy_(torch::addmm(t.base, t.b, t.a, /*beta=*/1, /*alpha=*/scale_));
  }
}

}  // namespace rlforge::models
