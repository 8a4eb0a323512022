// Safetensors files: read (memory-mapped, validated) and write.
//
// file -> mmap -> header JSON checked (size, dtypes, shapes, offsets in bounds and
//      non-overlapping) -> tensors, or element ranges of them, copied out on request
// specs -> header up front -> pieces pwritten in any order -> fsync -> renamed into place
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
#include "common/file_system.h"

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
  // Elements [begin, begin + count) of the tensor in row-major order, as a fresh flat CPU
  // tensor [count] with the file's dtype. Touches only the pages of that range.
  absl::StatusOr<torch::Tensor> ReadRange(const std::string& name, int64_t begin,
                                          int64_t count) const;

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

struct SafetensorSpec {
  std::string name;
  torch::Dtype dtype = torch::kFloat32;
  std::vector<int64_t> shape;
};

// Writes a file too large to hold in memory, piece by piece. Create lays out the header
// from the specs (in their order) and sizes a temporary file (path + ".tmp"); Write puts
// values at any element offset of any tensor, in any order; Finish checks that every element
// was written, fsyncs, renames into place and fsyncs the directory. Destroyed unfinished, it
// removes the temporary file. Every file operation goes through `fs`, which must outlive the
// writer. One thread.
class SafetensorsWriter {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsWriter>> Create(
      const std::string& path, const std::vector<SafetensorSpec>& tensors,
      const std::map<std::string, std::string>& metadata = {},
      FileSystem& fs = FileSystem::Default());
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // values (any shape, the spec's dtype) go to elements [element_offset,
  // element_offset + values.numel()) of tensor `name`, in row-major order.
  absl::Status Write(const std::string& name, int64_t element_offset, const torch::Tensor& values);
  absl::Status Finish();

 private:
  struct Slot {
    torch::Dtype dtype;
    int64_t numel = 0;
    uint64_t begin = 0;                  // byte offset in the data buffer
    std::map<int64_t, int64_t> written;  // element ranges written, merged: begin -> end
  };
  SafetensorsWriter() = default;

  FileSystem* fs_ = nullptr;
  std::string path_, tmp_;
  std::unique_ptr<WritableFile> file_;  // null once finished
  uint64_t data_start_ = 0;             // file offset of the data buffer
  std::map<std::string, Slot> slots_;
};

// "F32" <-> torch dtype; error for dtypes torch cannot hold.
absl::StatusOr<torch::Dtype> SafetensorDtype(const std::string& name);
absl::StatusOr<std::string> SafetensorDtypeName(torch::Dtype dtype);

}  // namespace rlforge::models
