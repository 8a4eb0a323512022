#include "models/hf_checkpoint.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/atomic_file.h"
#include "common/status.h"
#include "models/safetensors.h"
#include "nlohmann/json.hpp"

namespace rlforge::models {

namespace fs = std::filesystem;

namespace {

absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// name -> shard file (relative to dir).
absl::StatusOr<std::map<std::string, std::string>> WeightMap(const std::string& dir) {
  const std::string index = dir + "/model.safetensors.index.json";
  std::map<std::string, std::string> out;
  if (!fs::exists(index)) {
    const std::string single = dir + "/model.safetensors";
    if (!fs::exists(single)) {
      return absl::NotFoundError(
          absl::StrCat(dir, ": neither model.safetensors nor model.safetensors.index.json found"));
    }
    return out;  // empty: single file
  }
  auto text = ReadText(index);
  if (!text.ok()) return text.status();
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") ||
      !j["weight_map"].is_object()) {
    return absl::DataLossError(absl::StrCat(index, ": expected a JSON object with weight_map"));
  }
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it.value().is_string()) {
      return absl::DataLossError(
          absl::StrCat(index, ": weight_map.", it.key(), ": expected a file name"));
    }
    std::string file = it.value().get<std::string>();
    if (file.empty() || absl::StrContains(file, "/")) {
      return absl::DataLossError(
          absl::StrCat(index, ": weight_map.", it.key(), ": bad shard name '", file, "'"));
    }
    out[it.key()] = file;
  }
  return out;
}

bool Ignorable(const std::string& name, const TransformerConfig& c) {
  if (absl::EndsWith(name, "rotary_emb.inv_freq")) return true;  // old transformers buffers
  return c.tie_word_embeddings && name == "lm_head.weight";
}

}  // namespace

absl::StatusOr<TransformerConfig> LoadHfConfig(const std::string& dir) {
  const std::string path = dir + "/config.json";
  auto text = ReadText(path);
  if (!text.ok()) return text.status();
  return ParseHfConfig(*text, path);
}

absl::StatusOr<HfTensorFiles> OpenHfTensors(const std::string& dir) {
  auto weight_map = WeightMap(dir);
  if (!weight_map.ok()) return weight_map.status();
  HfTensorFiles out;
  std::set<std::string> file_names;
  for (const auto& [n, f] : *weight_map) file_names.insert(f);
  if (weight_map->empty()) file_names.insert("model.safetensors");
  for (const auto& f : file_names) {
    auto file = SafetensorsFile::Open(dir + "/" + f);
    if (!file.ok()) return file.status();
    for (const auto& n : (*file)->names()) out.names.insert(n);
    out.files[f] = std::move(*file);
  }
  out.weight_map = std::move(*weight_map);
  return out;
}

const SafetensorsFile* HfTensorFiles::Locate(const std::string& name) const {
  if (weight_map.empty()) return files.begin()->second.get();
  auto it = weight_map.find(name);
  return it == weight_map.end() ? nullptr : files.at(it->second).get();
}

absl::StatusOr<Transformer> LoadHfModel(const std::string& dir, torch::Dtype dtype,
                                        const SetupProgress& progress) {
  if (dtype != torch::kFloat32 && dtype != torch::kBFloat16) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, ": dtype must be float32 or bfloat16, got ", c10::toString(dtype)));
  }
  auto config = LoadHfConfig(dir);
  if (!config.ok()) return config.status();
  auto tensors = OpenHfTensors(dir);
  if (!tensors.ok()) return tensors.status();
  const std::set<std::string>& names_in_files = tensors->names;
  auto locate = [&](const std::string& name) { return tensors->Locate(name); };

  const bool value_head = names_in_files.count("value_head.weight") > 0;
  if (progress) progress("loading model: building the model");
  Transformer model(*config, value_head);
  std::set<std::string> used;
  int64_t total = 0, done = 0;
  for (const auto& p : model->parameters()) total += p.numel();
  int percent = -1;
  {
    torch::NoGradGuard g;
    for (auto& p : model->named_parameters()) {
      ReportPercent(progress, "loading model", done, total, &percent);
      done += p.value().numel();
      const std::string& name = p.key();
      const SafetensorsFile* file = locate(name);
      if (file == nullptr || !file->contains(name)) {
        return absl::NotFoundError(absl::StrCat(dir, ": tensor '", name, "' missing from ",
                                                file ? file->path() : "the weight map"));
      }
      auto t = file->Read(name);
      if (!t.ok()) return t.status();
      if (t->sizes() != p.value().sizes()) {
        return absl::InvalidArgumentError(
            absl::StrCat(file->path(), ": tensor '", name, "' has shape ", c10::str(t->sizes()),
                         ", config.json implies ", c10::str(p.value().sizes())));
      }
      if (!t->is_floating_point()) {
        return absl::InvalidArgumentError(absl::StrCat(file->path(), ": tensor '", name,
                                                       "' has non-float dtype ",
                                                       c10::toString(t->scalar_type())));
      }
      p.value().copy_(*t);
      used.insert(name);
    }
  }
  for (const auto& n : names_in_files) {
    if (used.count(n) == 0 && !Ignorable(n, *config)) {
      return absl::InvalidArgumentError(absl::StrCat(
          dir, ": unexpected tensor '", n, "' (not a parameter of ", config->architecture, ")"));
    }
  }
  model->to(dtype);
  return model;
}

absl::Status SaveHfModel(const Transformer& model, const std::string& dir,
                         const SaveHfOptions& options) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(dir, ": cannot create: ", ec.message()));
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  torch::Dtype dtype = torch::kFloat32;
  for (const auto& p : model->named_parameters()) {
    if (!options.include_value_head && absl::StartsWith(p.key(), "value_head.")) continue;
    tensors.emplace_back(p.key(), p.value().detach());
    dtype = p.value().scalar_type();
  }
  // Greedy shards in parameter order, as transformers does.
  std::vector<std::vector<std::pair<std::string, torch::Tensor>>> shards(1);
  int64_t shard_bytes = 0, total = 0;
  for (auto& t : tensors) {
    int64_t b = t.second.numel() * t.second.element_size();
    if (shard_bytes > 0 && shard_bytes + b > options.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(t);
    shard_bytes += b;
    total += b;
  }
  RETURN_IF_ERROR(RemoveHfWeights(dir));
  const std::map<std::string, std::string> meta = {{"format", "pt"}};
  if (shards.size() == 1) {
    if (auto s = WriteSafetensors(dir + "/model.safetensors", shards[0], meta); !s.ok()) return s;
  } else {
    nlohmann::json index;
    index["metadata"] = {{"total_size", total}};
    index["weight_map"] = nlohmann::json::object();
    for (size_t i = 0; i < shards.size(); ++i) {
      std::string file = absl::StrFormat("model-%05d-of-%05d.safetensors", i + 1, shards.size());
      if (auto s = WriteSafetensors(dir + "/" + file, shards[i], meta); !s.ok()) return s;
      for (const auto& [name, t] : shards[i]) index["weight_map"][name] = file;
    }
    if (auto s = WriteFileAtomic(dir + "/model.safetensors.index.json", index.dump(2) + "\n");
        !s.ok())
      return s;
  }
  const char* dtype_name = dtype == torch::kBFloat16 ? "bfloat16" : "float32";
  return WriteFileAtomic(dir + "/config.json", WriteHfConfig(model->config(), dtype_name));
}

absl::Status RemoveHfWeights(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::string f = e.path().filename().string();
    if (f == "model.safetensors" || f == "model.safetensors.index.json" ||
        (absl::StartsWith(f, "model-") && absl::EndsWith(f, ".safetensors"))) {
      fs::remove(e.path(), ec);
      if (ec)
        return absl::InternalError(
            absl::StrCat(e.path().string(), ": cannot remove: ", ec.message()));
    }
  }
  if (ec) return absl::InternalError(absl::StrCat(dir, ": cannot list: ", ec.message()));
  return absl::OkStatus();
}

void CopyParameters(const Transformer& src, Transformer& dst) {
  torch::NoGradGuard g;
  auto from = src->named_parameters();
  for (auto& p : dst->named_parameters()) p.value().copy_(from[p.key()]);
}

}  // namespace rlforge::models
