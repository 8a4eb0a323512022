#include "models/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace rlforge::models {

namespace {

// GGUF's metadata value types.
enum : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

constexpr uint64_t kDefaultAlignment = 32;
constexpr int64_t kBlock = 32;  // elements per block of Q4_0, Q4_1, Q8_0

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000 | (mant << 13);  // inf, nan
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    exp = 113;
    while ((mant & 0x400) == 0) {
      mant <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t Load16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

// Bytes of `count` elements of `type`; 0 for a type Dequantize does not handle.
uint64_t TypeBytes(uint32_t type, int64_t count) {
  const uint64_t n = static_cast<uint64_t>(count);
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32:
      return 4 * n;
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return 2 * n;
    case GgmlType::kQ4_0:
      return n / kBlock * 18;
    case GgmlType::kQ4_1:
      return n / kBlock * 20;
    case GgmlType::kQ8_0:
      return n / kBlock * 34;
  }
  return 0;
}

bool Blocked(uint32_t type) {
  const auto t = static_cast<GgmlType>(type);
  return t == GgmlType::kQ4_0 || t == GgmlType::kQ4_1 || t == GgmlType::kQ8_0;
}

// A bounds-checked cursor over the mapped file.
class Reader {
 public:
  Reader(const uint8_t* p, size_t size, const std::string& path)
      : p_(p), size_(size), path_(path) {}
  uint64_t pos() const { return pos_; }
  absl::Status Need(uint64_t n, const char* what) {
    if (n > size_ - pos_) {
      return absl::DataLossError(absl::StrCat(path_, ": truncated at byte ", pos_, " reading ",
                                              what, " (", n, " bytes needed, ", size_ - pos_,
                                              " left)"));
    }
    return absl::OkStatus();
  }
  template <typename T>
  absl::StatusOr<T> Read(const char* what) {
    RETURN_IF_ERROR(Need(sizeof(T), what));
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  absl::StatusOr<std::string> String(const char* what) {
    ASSIGN_OR_RETURN(uint64_t n, Read<uint64_t>(what));
    RETURN_IF_ERROR(Need(n, what));
    std::string s(reinterpret_cast<const char*>(p_ + pos_), n);
    pos_ += n;
    return s;
  }

 private:
  const uint8_t* p_;
  size_t size_;
  const std::string& path_;
  uint64_t pos_ = 0;
};

absl::StatusOr<GgufValue> ReadValue(Reader& r, uint32_t type, const std::string& key, int depth) {
  GgufValue v;
  auto as_int = [&](auto x) {
    v.kind = GgufValue::Kind::kInt;
    v.i = static_cast<int64_t>(x);
    return v;
  };
  switch (type) {
    case kU8: {
      ASSIGN_OR_RETURN(uint8_t x, r.Read<uint8_t>(key.c_str()));
      return as_int(x);
    }
    case kI8: {
      ASSIGN_OR_RETURN(int8_t x, r.Read<int8_t>(key.c_str()));
      return as_int(x);
    }
    case kU16: {
      ASSIGN_OR_RETURN(uint16_t x, r.Read<uint16_t>(key.c_str()));
      return as_int(x);
    }
    case kI16: {
      ASSIGN_OR_RETURN(int16_t x, r.Read<int16_t>(key.c_str()));
      return as_int(x);
    }
    case kU32: {
      ASSIGN_OR_RETURN(uint32_t x, r.Read<uint32_t>(key.c_str()));
      return as_int(x);
    }
    case kI32: {
      ASSIGN_OR_RETURN(int32_t x, r.Read<int32_t>(key.c_str()));
      return as_int(x);
    }
    case kI64: {
      ASSIGN_OR_RETURN(int64_t x, r.Read<int64_t>(key.c_str()));
      return as_int(x);
    }
    case kU64: {
      ASSIGN_OR_RETURN(uint64_t x, r.Read<uint64_t>(key.c_str()));
      if (x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return absl::OutOfRangeError(absl::StrCat("metadata ", key, ": ", x, " is out of range"));
      }
      return as_int(x);
    }
    case kF32: {
      ASSIGN_OR_RETURN(float x, r.Read<float>(key.c_str()));
      v.kind = GgufValue::Kind::kFloat;
      v.f = x;
      return v;
    }
    case kF64: {
      ASSIGN_OR_RETURN(double x, r.Read<double>(key.c_str()));
      v.kind = GgufValue::Kind::kFloat;
      v.f = x;
      return v;
    }
    case kBool: {
      ASSIGN_OR_RETURN(uint8_t x, r.Read<uint8_t>(key.c_str()));
      v.kind = GgufValue::Kind::kBool;
      v.b = x != 0;
      return v;
    }
    case kString: {
      v.kind = GgufValue::Kind::kString;
      ASSIGN_OR_RETURN(v.s, r.String(key.c_str()));
      return v;
    }
    case kArray: {
      if (depth > 4)
        return absl::DataLossError(absl::StrCat("metadata ", key, ": arrays nest too deep"));
      ASSIGN_OR_RETURN(uint32_t item_type, r.Read<uint32_t>(key.c_str()));
      ASSIGN_OR_RETURN(uint64_t n, r.Read<uint64_t>(key.c_str()));
      // Every item takes at least one byte: a count beyond the file is corrupt.
      RETURN_IF_ERROR(r.Need(n, key.c_str()));
      v.kind = GgufValue::Kind::kArray;
      v.items.reserve(n);
      for (uint64_t k = 0; k < n; ++k) {
        ASSIGN_OR_RETURN(GgufValue item, ReadValue(r, item_type, key, depth + 1));
        v.items.push_back(std::move(item));
      }
      return v;
    }
  }
  return absl::DataLossError(absl::StrCat("metadata ", key, ": unknown value type ", type));
}

}  // namespace

std::string GgmlTypeName(uint32_t type) {
  static const char* const kNames[] = {
      "F32",     "F16",    "Q4_0",    "Q4_1",  "Q4_2",   "Q4_3",  "Q5_0",  "Q5_1",
      "Q8_0",    "Q8_1",   "Q2_K",    "Q3_K",  "Q4_K",   "Q5_K",  "Q6_K",  "Q8_K",
      "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS",
      "I8",      "I16",    "I32",     "I64",   "F64",    "IQ1_M", "BF16"};
  if (type < sizeof(kNames) / sizeof(kNames[0])) return kNames[type];
  return absl::StrCat("type ", type);
}

int64_t GgufTensorInfo::elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

absl::Status DequantizeGgml(uint32_t type, const uint8_t* src, size_t bytes, int64_t count,
                            float* out) {
  const uint64_t need = TypeBytes(type, count);
  if (need == 0 && count > 0) {
    return absl::UnimplementedError(
        absl::StrCat("tensor type ", GgmlTypeName(type),
                     " is not supported (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1)"));
  }
  if (Blocked(type) && count % kBlock != 0) {
    return absl::DataLossError(absl::StrCat(count, " elements of ", GgmlTypeName(type),
                                            " are not whole blocks of ", kBlock));
  }
  if (need > bytes) {
    return absl::DataLossError(absl::StrCat(GgmlTypeName(type), ": ", count, " elements need ",
                                            need, " bytes, ", bytes, " given"));
  }
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32:
      std::memcpy(out, src, need);
      break;
    case GgmlType::kF16:
      for (int64_t k = 0; k < count; ++k) out[k] = HalfToFloat(Load16(src + 2 * k));
      break;
    case GgmlType::kBF16:
      for (int64_t k = 0; k < count; ++k) {
        const uint32_t bits = static_cast<uint32_t>(Load16(src + 2 * k)) << 16;
        std::memcpy(out + k, &bits, 4);
      }
      break;
    case GgmlType::kQ8_0:  // block: fp16 d, 32 x int8 q; x = d * q
      for (int64_t b = 0; b < count / kBlock; ++b) {
        const uint8_t* blk = src + b * 34;
        const float d = HalfToFloat(Load16(blk));
        for (int j = 0; j < kBlock; ++j) {
          out[b * kBlock + j] = d * static_cast<float>(static_cast<int8_t>(blk[2 + j]));
        }
      }
      break;
    case GgmlType::kQ4_0:    // block: fp16 d, 16 bytes of nibbles; x = d * (q - 8)
    case GgmlType::kQ4_1: {  // block: fp16 d, fp16 m, 16 bytes of nibbles; x = d * q + m
      const bool q41 = static_cast<GgmlType>(type) == GgmlType::kQ4_1;
      const int64_t stride = q41 ? 20 : 18;
      for (int64_t b = 0; b < count / kBlock; ++b) {
        const uint8_t* blk = src + b * stride;
        const float d = HalfToFloat(Load16(blk));
        const float m = q41 ? HalfToFloat(Load16(blk + 2)) : -8.0f * d;
        const uint8_t* qs = blk + (q41 ? 4 : 2);
        float* o = out + b * kBlock;
        // Element j in the low nibble of byte j, element j + 16 in its high nibble.
        for (int j = 0; j < kBlock / 2; ++j) {
          o[j] = d * static_cast<float>(qs[j] & 0x0f) + m;
          o[j + kBlock / 2] = d * static_cast<float>(qs[j] >> 4) + m;
        }
      }
      break;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat(path, ": ", std::strerror(errno)));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ > 0) {
    void* m = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return absl::InternalError(absl::StrCat(path, ": mmap: ", std::strerror(err)));
    }
    f->map_ = static_cast<const uint8_t*>(m);
  }
  ::close(fd);
  RETURN_IF_ERROR(f->Parse());
  return f;
}

GgufFile::~GgufFile() {
  if (map_ != nullptr) munmap(const_cast<uint8_t*>(map_), size_);
}

absl::Status GgufFile::Parse() {
  Reader r(map_, size_, path_);
  RETURN_IF_ERROR(r.Need(4, "the magic"));
  if (std::memcmp(map_, "GGUF", 4) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": not a GGUF file (no GGUF magic)"));
  }
  (void)r.Read<uint32_t>("the magic");
  ASSIGN_OR_RETURN(version_, r.Read<uint32_t>("the version"));
  if (version_ != 2 && version_ != 3) {
    return absl::UnimplementedError(
        absl::StrCat(path_, ": GGUF version ", version_, " is not supported (2, 3)"));
  }
  ASSIGN_OR_RETURN(uint64_t n_tensors, r.Read<uint64_t>("the tensor count"));
  ASSIGN_OR_RETURN(uint64_t n_kv, r.Read<uint64_t>("the metadata count"));
  RETURN_IF_ERROR(r.Need(n_kv, "the metadata"));
  for (uint64_t k = 0; k < n_kv; ++k) {
    ASSIGN_OR_RETURN(std::string key, r.String("a metadata key"));
    ASSIGN_OR_RETURN(uint32_t type, r.Read<uint32_t>(key.c_str()));
    absl::StatusOr<GgufValue> v = ReadValue(r, type, key, 0);
    if (!v.ok()) return Annotate(v.status(), path_);
    metadata_[key] = *std::move(v);
  }
  RETURN_IF_ERROR(r.Need(n_tensors, "the tensor infos"));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensorInfo t;
    ASSIGN_OR_RETURN(t.name, r.String("a tensor name"));
    ASSIGN_OR_RETURN(uint32_t n_dims, r.Read<uint32_t>(t.name.c_str()));
    if (n_dims == 0 || n_dims > 4) {
      return absl::DataLossError(
          absl::StrCat(path_, ": tensor ", t.name, " has ", n_dims, " dimensions (1 to 4)"));
    }
    for (uint32_t d = 0; d < n_dims; ++d) {
      ASSIGN_OR_RETURN(uint64_t dim, r.Read<uint64_t>(t.name.c_str()));
      if (dim == 0 || dim > (uint64_t{1} << 40)) {
        return absl::DataLossError(
            absl::StrCat(path_, ": tensor ", t.name, ": dimension ", d, " is ", dim));
      }
      t.dims.push_back(static_cast<int64_t>(dim));
    }
    ASSIGN_OR_RETURN(t.type, r.Read<uint32_t>(t.name.c_str()));
    ASSIGN_OR_RETURN(t.offset, r.Read<uint64_t>(t.name.c_str()));
    tensors_.push_back(std::move(t));
  }
  uint64_t alignment = kDefaultAlignment;
  if (auto it = metadata_.find("general.alignment"); it != metadata_.end()) {
    if (it->second.kind != GgufValue::Kind::kInt || it->second.i <= 0) {
      return absl::DataLossError(absl::StrCat(path_,
                                              ": metadata general.alignment is not a "
                                              "positive integer"));
    }
    alignment = static_cast<uint64_t>(it->second.i);
  }
  data_start_ = (r.pos() + alignment - 1) / alignment * alignment;
  for (const GgufTensorInfo& t : tensors_) {
    const uint64_t bytes = TypeBytes(t.type, t.elements());
    if (bytes == 0) continue;  // checked when dequantized, naming the type
    if (data_start_ > size_ || t.offset > size_ - data_start_ ||
        bytes > size_ - data_start_ - t.offset) {
      return absl::DataLossError(absl::StrCat(path_, ": tensor ", t.name, " (", bytes,
                                              " bytes at offset ", t.offset,
                                              ") runs past the end of the file"));
    }
  }
  return absl::OkStatus();
}

const GgufTensorInfo* GgufFile::FindTensor(const std::string& name) const {
  for (const GgufTensorInfo& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

absl::StatusOr<const GgufValue*> GgufFile::Get(const std::string& key, GgufValue::Kind kind,
                                               const char* what) const {
  auto it = metadata_.find(key);
  if (it == metadata_.end()) {
    return absl::NotFoundError(absl::StrCat(path_, ": metadata ", key, ": missing"));
  }
  if (it->second.kind != kind &&
      !(kind == GgufValue::Kind::kFloat && it->second.kind == GgufValue::Kind::kInt)) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": metadata ", key, ": expected ", what));
  }
  return &it->second;
}

absl::StatusOr<int64_t> GgufFile::Int(const std::string& key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, Get(key, GgufValue::Kind::kInt, "an integer"));
  return v->i;
}

absl::StatusOr<double> GgufFile::Float(const std::string& key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, Get(key, GgufValue::Kind::kFloat, "a number"));
  return v->kind == GgufValue::Kind::kInt ? static_cast<double>(v->i) : v->f;
}

absl::StatusOr<bool> GgufFile::Bool(const std::string& key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, Get(key, GgufValue::Kind::kBool, "a boolean"));
  return v->b;
}

absl::StatusOr<std::string> GgufFile::String(const std::string& key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, Get(key, GgufValue::Kind::kString, "a string"));
  return v->s;
}

absl::StatusOr<std::vector<std::string>> GgufFile::Strings(const std::string& key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, Get(key, GgufValue::Kind::kArray, "an array of strings"));
  std::vector<std::string> out;
  out.reserve(v->items.size());
  for (const GgufValue& item : v->items) {
    if (item.kind != GgufValue::Kind::kString) {
      return absl::InvalidArgumentError(
          absl::StrCat(path_, ": metadata ", key, ": expected an array of strings"));
    }
    out.push_back(item.s);
  }
  return out;
}

absl::StatusOr<std::vector<int64_t>> GgufFile::Ints(const std::string& key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, Get(key, GgufValue::Kind::kArray, "an array of integers"));
  std::vector<int64_t> out;
  out.reserve(v->items.size());
  for (const GgufValue& item : v->items) {
    if (item.kind != GgufValue::Kind::kInt) {
      return absl::InvalidArgumentError(
          absl::StrCat(path_, ": metadata ", key, ": expected an array of integers"));
    }
    out.push_back(item.i);
  }
  return out;
}

absl::StatusOr<std::vector<float>> GgufFile::Dequantize(const std::string& name) const {
  const GgufTensorInfo* t = FindTensor(name);
  if (t == nullptr) return absl::NotFoundError(absl::StrCat(path_, ": no tensor ", name));
  std::vector<float> out(static_cast<size_t>(t->elements()));
  const uint64_t at = data_start_ + t->offset;
  const size_t left = at <= size_ ? size_ - at : 0;
  absl::Status s = DequantizeGgml(t->type, map_ + std::min<uint64_t>(at, size_), left,
                                  t->elements(), out.data());
  if (!s.ok()) return Annotate(s, absl::StrCat(path_, ": tensor ", name));
  return out;
}

}  // namespace rlforge::models
