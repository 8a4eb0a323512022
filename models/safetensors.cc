#include "models/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
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
  f->map_ = static_cast<const uint8_t*>(m);
  f->map_size_ = size;

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
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) return Corrupt(path, "__metadata__ is not an object");
      for (auto m2 = v.begin(); m2 != v.end(); ++m2) {
        if (!m2.value().is_string()) {
          return Corrupt(path, absl::StrCat("__metadata__.", m2.key(), " is not a string"));
        }
        f->metadata_[m2.key()] = m2.value().get<std::string>();
      }
      continue;
    }
    const std::string where = absl::StrCat("tensor '", name, "'");
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
        !v.contains("data_offsets")) {
      return Corrupt(path, absl::StrCat(where, ": needs dtype, shape and data_offsets"));
    }
    SafetensorInfo info;
    if (!v["dtype"].is_string())
      return Corrupt(path, absl::StrCat(where, ": dtype is not a string"));
    info.dtype = v["dtype"].get<std::string>();
    auto dt = SafetensorDtype(info.dtype);
    if (!dt.ok()) return Corrupt(path, absl::StrCat(where, ": ", dt.status().message()));
    if (!v["shape"].is_array()) return Corrupt(path, absl::StrCat(where, ": shape is not a list"));
    uint64_t numel = 1;
    for (const auto& s : v["shape"]) {
      if (!s.is_number_unsigned()) {
        return Corrupt(path, absl::StrCat(where, ": shape entry ", s.dump(), " is not a size"));
      }
      uint64_t dim = s.get<uint64_t>();
      if (dim != 0 && numel > (uint64_t{1} << 62) / dim) {
        return Corrupt(path, absl::StrCat(where, ": shape overflows"));
      }
      numel *= dim;
      info.shape.push_back(static_cast<int64_t>(dim));
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned()) {
      return Corrupt(path, absl::StrCat(where, ": data_offsets must be [begin, end]"));
    }
    info.begin = off[0].get<uint64_t>();
    info.end = off[1].get<uint64_t>();
    const uint64_t bytes = numel * c10::elementSize(*dt);
    if (info.end < info.begin || info.end - info.begin != bytes) {
      return Corrupt(path, absl::StrCat(where, ": data_offsets [", info.begin, ", ", info.end,
                                        "] do not hold ", bytes, " bytes of ", info.dtype, " [",
                                        absl::StrJoin(info.shape, ", "), "]"));
    }
    if (info.end > data_size) {
      return Corrupt(
          path, absl::StrCat(where, ": data ends at byte ", info.end, " but the data buffer has ",
                             data_size, " bytes; truncated?"));
    }
    ranges.emplace_back(info.begin, info.end);
    f->infos_[name] = std::move(info);
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

absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<torch::Tensor> data;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (name.empty() || name == "__metadata__" || header.contains(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor name '", name, "' is empty, reserved or repeated"));
    }
    auto dname = SafetensorDtypeName(tensor.scalar_type());
    if (!dname.ok())
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor '", name, "': ", dname.status().message()));
    auto t = tensor.detach().to(torch::kCPU).contiguous();
    uint64_t bytes = static_cast<uint64_t>(t.numel()) * t.element_size();
    header[name] = {
        {"dtype", *dname}, {"shape", t.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(std::move(t));
  }
  std::string h = header.dump();
  while ((h.size() % 8) != 0) h.push_back(' ');  // keeps the data 8-byte aligned
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return absl::InternalError(absl::StrCat(tmp, ": cannot open for writing"));
    uint64_t n = h.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out.write(h.data(), static_cast<std::streamsize>(h.size()));
    for (const auto& t : data) {
      out.write(static_cast<const char*>(t.data_ptr()),
                static_cast<std::streamsize>(t.numel() * t.element_size()));
    }
    out.flush();
    if (!out) return absl::InternalError(absl::StrCat(tmp, ": write failed"));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot rename ", tmp, " to ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace rlforge::models
