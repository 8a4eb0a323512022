// Safetensors files: read (memory-mapped, validated) and write.
//
// file -> mmap -> header JSON checked (size, dtypes, shapes, offsets in bounds and
//      non-overlapping) -> tensors copied out on request
//
// Format: u64 little-endian header length N, N bytes of JSON
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the data buffer (offsets relative to its start). Every check happens in Open(),
// so a corrupt or truncated file is an error naming the file and the tensor, never a
// crash later. A SafetensorsFile is immutable after Open and may be read from several
// threads; tensors it returns own their memory (the mapping can close).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace rlforge::models {

struct SafetensorInfo {
  std::string dtype;  // "F32", "BF16", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets in the data buffer
};

class SafetensorsFile {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const { return infos_.count(name) > 0; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  absl::StatusOr<SafetensorInfo> Info(const std::string& name) const;
  // A fresh CPU tensor with the file's dtype and shape.
  absl::StatusOr<torch::Tensor> Read(const std::string& name) const;

 private:
  SafetensorsFile() = default;

  std::string path_;
  const uint8_t* map_ = nullptr;
  size_t map_size_ = 0;
  const uint8_t* data_ = nullptr;  // start of the data buffer
  std::map<std::string, SafetensorInfo> infos_;
  std::map<std::string, std::string> metadata_;
};

// Writes tensors (any order; CPU or not, contiguous or not) atomically: a temporary file
// renamed into place. Names must be unique and non-empty.
absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

// "F32" <-> torch dtype; error for dtypes torch cannot hold.
absl::StatusOr<torch::Dtype> SafetensorDtype(const std::string& name);
absl::StatusOr<std::string> SafetensorDtypeName(torch::Dtype dtype);

}  // namespace rlforge::models
