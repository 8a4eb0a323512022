// GgufFile: a GGUF file (llama.cpp's model format), read: its metadata and its tensors,
// dequantized to fp32.
//
// file -> mmap -> header, metadata (key -> value), tensor infos -> Dequantize(name) -> floats
//
// The file is mapped read-only and checked as it is parsed: every length, count and offset is
// bounded by the file's size, so a truncated or corrupt file is an error naming it and the
// place, never a crash. Tensors of types F32, F16, BF16, Q8_0, Q4_0 and Q4_1 dequantize; any
// other type is an error naming the tensor and its type. Read-only after Open; any thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace rlforge::models {

// One metadata value. Integers of every width are kInt (a uint64 above INT64_MAX is an error
// at Open); float32 and float64 are kFloat.
struct GgufValue {
  enum class Kind { kInt, kFloat, kBool, kString, kArray };
  Kind kind = Kind::kInt;
  int64_t i = 0;
  double f = 0;
  bool b = false;
  std::string s;
  std::vector<GgufValue> items;  // kArray
};

// GGML's tensor types (ggml.h's numbering); the ones Dequantize handles are named.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ8_0 = 8,
  kBF16 = 30,
};
// "Q4_1", "Q6_K", ... or "type 77" for a number no GGML version used.
std::string GgmlTypeName(uint32_t type);

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // GGML order: dims[0] varies fastest
  uint32_t type = 0;
  uint64_t offset = 0;  // from the start of the data section
  int64_t elements() const;
  // Row-major shape, slowest first (a weight [out, in] as PyTorch holds it).
  std::vector<int64_t> shape() const { return {dims.rbegin(), dims.rend()}; }
};

class GgufFile {
 public:
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(const std::string& name) const;

  // Typed metadata: an absent key or a value of another kind is an error naming the file and
  // the key ("model.gguf: metadata llama.block_count: missing").
  bool Has(const std::string& key) const { return metadata_.count(key) > 0; }
  absl::StatusOr<int64_t> Int(const std::string& key) const;
  absl::StatusOr<double> Float(const std::string& key) const;  // an integer is taken too
  absl::StatusOr<bool> Bool(const std::string& key) const;
  absl::StatusOr<std::string> String(const std::string& key) const;
  absl::StatusOr<std::vector<std::string>> Strings(const std::string& key) const;
  absl::StatusOr<std::vector<int64_t>> Ints(const std::string& key) const;

  // The tensor's values in row-major order (shape()), as fp32.
  absl::StatusOr<std::vector<float>> Dequantize(const std::string& name) const;

 private:
  GgufFile() = default;
  absl::Status Parse();
  absl::StatusOr<const GgufValue*> Get(const std::string& key, GgufValue::Kind kind,
                                       const char* what) const;

  std::string path_;
  const uint8_t* map_ = nullptr;
  size_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t data_start_ = 0;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
};

// Dequantizes `count` elements of `type` from `src` (`bytes` long) into `out`; exposed for
// tests against hand-made blocks.
absl::Status DequantizeGgml(uint32_t type, const uint8_t* src, size_t bytes, int64_t count,
                            float* out);

}  // namespace rlforge::models
