// Hugging Face checkpoint directories: load into and save from a Transformer.
//
// dir/config.json -> TransformerConfig -> Transformer
// dir/model.safetensors | dir/model.safetensors.index.json + shards -> parameters by name
//
// Loading checks that every parameter is present with its exact shape and that the
// files hold nothing unexpected (transformers' non-persistent rotary inv_freq and a tied
// lm_head are tolerated); errors name the directory, file and tensor. Saving writes
// config.json and either one model.safetensors or shards of at most max_shard_bytes
// with transformers' naming (model-00001-of-00003.safetensors) and index; files are
// written to a temporary name and renamed, config.json last.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "common/setup_progress.h"
#include "models/safetensors.h"
#include "models/transformer.h"

namespace rlforge::models {

// Loads the value head too when the checkpoint has value_head.{weight,bias}. `progress` hears
// "loading model N%" (of the parameters' elements) as tensors are read.
absl::StatusOr<Transformer> LoadHfModel(const std::string& dir,
                                        torch::Dtype dtype = torch::kFloat32,
                                        const SetupProgress& progress = {});

// A checkpoint's safetensors files (model.safetensors, or the shards that
// model.safetensors.index.json lists), opened: headers checked, no tensor data read yet.
struct HfTensorFiles {
  std::map<std::string, std::unique_ptr<SafetensorsFile>> files;  // by name in the directory
  std::set<std::string> names;                                    // every tensor of every file
  std::map<std::string, std::string> weight_map;                  // tensor -> file; empty: one file
  // The file the checkpoint says holds `name` (nullptr if the index lists no such name);
  // the file itself may still lack it (check contains()).
  const SafetensorsFile* Locate(const std::string& name) const;
};
absl::StatusOr<HfTensorFiles> OpenHfTensors(const std::string& dir);

// Reads only config.json.
absl::StatusOr<TransformerConfig> LoadHfConfig(const std::string& dir);

struct SaveHfOptions {
  int64_t max_shard_bytes = int64_t{5} << 30;  // transformers' default "5GB"
  bool include_value_head = true;              // value_head.* when the model has one
};
// Tensors are written in the model's dtype (fp32 or bf16).
absl::Status SaveHfModel(const Transformer& model, const std::string& dir,
                         const SaveHfOptions& options = {});

// Removes the weight files of a previous save (model.safetensors, the index, model-*-of-*
// shards), so that a new save's files are the only ones a loader finds.
absl::Status RemoveHfWeights(const std::string& dir);

// Copies parameters by name from `src` into `dst` (same config); used for weight sync
// and tests.
void CopyParameters(const Transformer& src, Transformer& dst);

}  // namespace rlforge::models
