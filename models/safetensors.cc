#include "models/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/atomic_file.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace rlforge::models {

namespace {

constexpr uint64_t kMaxHeaderBytes = 100 << 20;  // the reference implementation's limit

struct DtypeEntry {
  const char* name;
  torch::Dtype dtype;
};
constexpr DtypeEntry kDtypes[] = {{"F64", torch::kFloat64}, {"F32", torch::kFloat32},
                                  {"F16", torch::kFloat16}, {"BF16", torch::kBFloat16},
                                  {"I64", torch::kInt64},   {"I32", torch::kInt32},
                                  {"I16", torch::kInt16},   {"I8", torch::kInt8},
                                  {"U8", torch::kUInt8},    {"BOOL", torch::kBool}};

absl::Status Corrupt(const std::string& path, const std::string& what) {
  return absl::DataLossError(absl::StrCat(path, ": corrupt safetensors file: ", what));
}

}  // namespace

absl::StatusOr<torch::Dtype> SafetensorDtype(const std::string& name) {
  for (const auto& e : kDtypes) {
    if (name == e.name) return e.dtype;
  }
  return absl::InvalidArgumentError(absl::StrCat("unsupported safetensors dtype '", name, "'"));
}

absl::StatusOr<std::string> SafetensorDtypeName(torch::Dtype dtype) {
  for (const auto& e : kDtypes) {
    if (dtype == e.dtype) return std::string(e.name);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("no safetensors dtype for torch dtype ", c10::toString(dtype)));
}

namespace {

struct Mapping {
  const uint8_t* data = nullptr;
  uint64_t size = 0;
};

// `path` mapped read-only; a file shorter than the 8-byte header length is corrupt.
absl::StatusOr<Mapping> MapFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return absl::InternalError(absl::StrCat(path, ": cannot stat: ", std::strerror(errno)));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    return Corrupt(path,
                   absl::StrCat("file is ", size, " bytes, shorter than the 8-byte header length"));
  }
  void* m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) {
    return absl::InternalError(absl::StrCat(path, ": cannot mmap: ", std::strerror(errno)));
  }
  return Mapping{static_cast<const uint8_t*>(m), size};
}

// The shape's sizes and element count, or what is wrong with it.
absl::Status ParseShape(const nlohmann::json& shape, const std::string& where,
                        std::vector<int64_t>* dims, uint64_t* numel) {
  if (!shape.is_array()) return absl::DataLossError(absl::StrCat(where, ": shape is not a list"));
  *numel = 1;
  for (const auto& s : shape) {
    if (!s.is_number_unsigned()) {
      return absl::DataLossError(absl::StrCat(where, ": shape entry ", s.dump(), " is not a size"));
    }
    uint64_t dim = s.get<uint64_t>();
    if (dim != 0 && *numel > (uint64_t{1} << 62) / dim) {
      return absl::DataLossError(absl::StrCat(where, ": shape overflows"));
    }
    *numel *= dim;
    dims->push_back(static_cast<int64_t>(dim));
  }
  return absl::OkStatus();
}

// One header entry: dtype, shape and data_offsets, checked against each other and against the
// `data_size` bytes after the header. Errors name the tensor (the caller adds the file).
absl::StatusOr<SafetensorInfo> ParseTensorInfo(const std::string& name, const nlohmann::json& v,
                                               uint64_t data_size) {
  const std::string where = absl::StrCat("tensor '", name, "'");
  auto bad = [&](const std::string& what) {
    return absl::DataLossError(absl::StrCat(where, ": ", what));
  };
  if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
      !v.contains("data_offsets")) {
    return bad("needs dtype, shape and data_offsets");
  }
  SafetensorInfo info;
  if (!v["dtype"].is_string()) return bad("dtype is not a string");
  info.dtype = v["dtype"].get<std::string>();
  auto dt = SafetensorDtype(info.dtype);
  if (!dt.ok()) return bad(std::string(dt.status().message()));
  uint64_t numel = 0;
  RETURN_IF_ERROR(ParseShape(v["shape"], where, &info.shape, &numel));
  const auto& off = v["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
      !off[1].is_number_unsigned()) {
    return bad("data_offsets must be [begin, end]");
  }
  info.begin = off[0].get<uint64_t>();
  info.end = off[1].get<uint64_t>();
  const uint64_t bytes = numel * c10::elementSize(*dt);
  if (info.end < info.begin || info.end - info.begin != bytes) {
    return bad(absl::StrCat("data_offsets [", info.begin, ", ", info.end, "] do not hold ", bytes,
                            " bytes of ", info.dtype, " [", absl::StrJoin(info.shape, ", "), "]"));
  }
  if (info.end > data_size) {
    return bad(absl::StrCat("data ends at byte ", info.end, " but the data buffer has ", data_size,
                            " bytes; truncated?"));
  }
  return info;
}

// __metadata__: an object of strings.
absl::Status ParseMetadata(const std::string& path, const nlohmann::json& v,
                           std::map<std::string, std::string>* out) {
  if (!v.is_object()) return Corrupt(path, "__metadata__ is not an object");
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!it.value().is_string()) {
      return Corrupt(path, absl::StrCat("__metadata__.", it.key(), " is not a string"));
    }
    (*out)[it.key()] = it.value().get<std::string>();
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  ASSIGN_OR_RETURN(Mapping mapping, MapFile(path));
  f->map_ = mapping.data;
  f->map_size_ = mapping.size;
  const uint64_t size = mapping.size;
  uint64_t n = 0;
  std::memcpy(&n, f->map_, 8);  // little-endian host
  if (n > kMaxHeaderBytes || n > size - 8) {
    return Corrupt(path, absl::StrCat("header length ", n, " exceeds the file (", size,
                                      " bytes) or the 100 MiB limit; truncated?"));
  }
  f->data_ = f->map_ + 8 + n;
  const uint64_t data_size = size - 8 - n;
  nlohmann::json header = nlohmann::json::parse(f->map_ + 8, f->map_ + 8 + n, nullptr,
                                                /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return Corrupt(path, "header is not a JSON object");
  }
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      RETURN_IF_ERROR(ParseMetadata(path, it.value(), &f->metadata_));
      continue;
    }
    auto info = ParseTensorInfo(it.key(), it.value(), data_size);
    if (!info.ok()) return Corrupt(path, std::string(info.status().message()));
    ranges.emplace_back(info->begin, info->end);
    f->infos_[it.key()] = *std::move(info);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) {
      return Corrupt(path, absl::StrCat("tensors overlap at byte ", ranges[i].first));
    }
  }
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(const_cast<uint8_t*>(map_), map_size_);
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : infos_) out.push_back(k);
  return out;
}

absl::StatusOr<SafetensorInfo> SafetensorsFile::Info(const std::string& name) const {
  auto it = infos_.find(name);
  if (it == infos_.end()) {
    return absl::NotFoundError(absl::StrCat(path_, ": no tensor named '", name, "'"));
  }
  return it->second;
}

absl::StatusOr<torch::Tensor> SafetensorsFile::Read(const std::string& name) const {
  auto it = infos_.find(name);
  if (it == infos_.end()) {
    return absl::NotFoundError(absl::StrCat(path_, ": no tensor named '", name, "'"));
  }
  const SafetensorInfo& info = it->second;
  auto dt = SafetensorDtype(info.dtype);
  if (!dt.ok()) return dt.status();
  auto t = torch::empty(info.shape, torch::dtype(*dt));
  if (info.end > info.begin) {
    std::memcpy(t.data_ptr(), data_ + info.begin, info.end - info.begin);
  }
  return t;
}

absl::StatusOr<torch::Tensor> SafetensorsFile::ReadRange(const std::string& name, int64_t begin,
                                                         int64_t count) const {
  auto it = infos_.find(name);
  if (it == infos_.end()) {
    return absl::NotFoundError(absl::StrCat(path_, ": no tensor named '", name, "'"));
  }
  const SafetensorInfo& info = it->second;
  auto dt = SafetensorDtype(info.dtype);
  if (!dt.ok()) return dt.status();
  const int64_t esize = static_cast<int64_t>(c10::elementSize(*dt));
  const int64_t numel = static_cast<int64_t>((info.end - info.begin) / esize);
  if (begin < 0 || count < 0 || begin > numel || count > numel - begin) {
    return absl::OutOfRangeError(absl::StrCat(path_, ": tensor '", name, "': elements [", begin,
                                              ", ", begin + count, ") outside its ", numel));
  }
  auto t = torch::empty({count}, torch::dtype(*dt));
  if (count > 0) std::memcpy(t.data_ptr(), data_ + info.begin + begin * esize, count * esize);
  return t;
}

namespace {

std::string_view Bytes(const void* data, uint64_t n) {
  return std::string_view(static_cast<const char*>(data), n);
}

// Adds [b, e) to disjoint, merged ranges.
void MarkWritten(std::map<int64_t, int64_t>& ranges, int64_t b, int64_t e) {
  auto it = ranges.upper_bound(b);
  if (it != ranges.begin() && std::prev(it)->second >= b) {
    --it;
    b = it->first;
    e = std::max(e, it->second);
    it = ranges.erase(it);
  }
  while (it != ranges.end() && it->first <= e) {
    e = std::max(e, it->second);
    it = ranges.erase(it);
  }
  ranges[b] = e;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SafetensorsWriter>> SafetensorsWriter::Create(
    const std::string& path, const std::vector<SafetensorSpec>& tensors,
    const std::map<std::string, std::string>& metadata, FileSystem& fs) {
  std::unique_ptr<SafetensorsWriter> w(new SafetensorsWriter());
  w->fs_ = &fs;
  w->path_ = path;
  w->tmp_ = path + ".tmp";
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const SafetensorSpec& spec : tensors) {
    if (spec.name.empty() || spec.name == "__metadata__" || header.contains(spec.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor name '", spec.name, "' is empty, reserved or repeated"));
    }
    auto dname = SafetensorDtypeName(spec.dtype);
    if (!dname.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor '", spec.name, "': ", dname.status().message()));
    }
    Slot slot{spec.dtype, 1, offset, {}};
    for (int64_t d : spec.shape) {
      if (d < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": tensor '", spec.name, "': negative dimension ", d));
      }
      slot.numel *= d;
    }
    const uint64_t bytes = static_cast<uint64_t>(slot.numel) * c10::elementSize(spec.dtype);
    header[spec.name] = {
        {"dtype", *dname}, {"shape", spec.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    w->slots_[spec.name] = std::move(slot);
  }
  std::string h = header.dump();
  while ((h.size() % 8) != 0) h.push_back(' ');  // keeps the data 8-byte aligned
  w->data_start_ = 8 + h.size();
  ASSIGN_OR_RETURN(w->file_, fs.NewWritableFile(w->tmp_));
  RETURN_IF_ERROR(w->file_->Truncate(w->data_start_ + offset));
  const uint64_t n = h.size();
  RETURN_IF_ERROR(w->file_->WriteAt(0, Bytes(&n, 8)));  // little-endian host
  RETURN_IF_ERROR(w->file_->WriteAt(8, h));
  return w;
}

SafetensorsWriter::~SafetensorsWriter() {
  if (file_ != nullptr) {
    file_.reset();
    fs_->Remove(tmp_).IgnoreError();  // may fail as the write did
  }
}

absl::Status SafetensorsWriter::Write(const std::string& name, int64_t element_offset,
                                      const torch::Tensor& values) {
  if (file_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(path_, ": already finished"));
  }
  auto it = slots_.find(name);
  if (it == slots_.end()) {
    return absl::NotFoundError(absl::StrCat(path_, ": no tensor named '", name, "' declared"));
  }
  Slot& slot = it->second;
  const std::string where = absl::StrCat(path_, ": tensor '", name, "': ");
  if (values.scalar_type() != slot.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(where, "declared ", c10::toString(slot.dtype),
                                                   ", written ",
                                                   c10::toString(values.scalar_type())));
  }
  const int64_t count = values.numel();
  if (element_offset < 0 || element_offset > slot.numel || count > slot.numel - element_offset) {
    return absl::OutOfRangeError(absl::StrCat(where, "elements [", element_offset, ", ",
                                              element_offset + count, ") outside its ",
                                              slot.numel));
  }
  if (count == 0) return absl::OkStatus();
  const torch::Tensor t = values.detach().to(torch::kCPU).contiguous();
  const uint64_t esize = c10::elementSize(slot.dtype);
  RETURN_IF_ERROR(file_->WriteAt(data_start_ + slot.begin + element_offset * esize,
                                 Bytes(t.data_ptr(), count * esize)));
  MarkWritten(slot.written, element_offset, element_offset + count);
  return absl::OkStatus();
}

absl::Status SafetensorsWriter::Finish() {
  if (file_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(path_, ": already finished"));
  }
  for (const auto& [name, slot] : slots_) {
    const int64_t done = slot.written.empty() ? 0 : slot.written.begin()->second;
    if (slot.numel > 0 &&
        (slot.written.size() != 1 || slot.written.begin()->first != 0 || done != slot.numel)) {
      return absl::FailedPreconditionError(
          absl::StrCat(path_, ": tensor '", name, "': not every element written (",
                       slot.written.size(), " separate ranges, numel ", slot.numel, ")"));
    }
  }
  RETURN_IF_ERROR(file_->Sync());
  RETURN_IF_ERROR(file_->Close());
  RETURN_IF_ERROR(fs_->Rename(tmp_, path_));
  file_.reset();
  return SyncParentDirectory(*fs_, path_);
}

absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorSpec> specs;
  for (const auto& [name, t] : tensors) specs.push_back({name, t.scalar_type(), t.sizes().vec()});
  ASSIGN_OR_RETURN(auto writer, SafetensorsWriter::Create(path, specs, metadata));
  for (const auto& [name, t] : tensors) RETURN_IF_ERROR(writer->Write(name, 0, t));
  return writer->Finish();
}

}  // namespace rlforge::models
