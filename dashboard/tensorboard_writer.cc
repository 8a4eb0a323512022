#include "dashboard/tensorboard_writer.h"

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "proto/tensorboard.pb.h"

namespace rlforge::dashboard {

namespace {

std::array<uint32_t, 256> MakeCrcTable() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}

void AppendLittleEndian(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

}  // namespace

uint32_t Crc32c(const void* data, size_t n) {
  static const std::array<uint32_t, 256> table = MakeCrcTable();
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t MaskCrc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

std::string FrameRecord(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  AppendLittleEndian(&out, data.size(), 8);
  AppendLittleEndian(&out, MaskCrc(Crc32c(out.data(), 8)), 4);
  out.append(data);
  AppendLittleEndian(&out, MaskCrc(Crc32c(data.data(), data.size())), 4);
  return out;
}

double WallTimeSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

absl::StatusOr<std::unique_ptr<EventFileWriter>> EventFileWriter::Create(const std::string& dir,
                                                                         double wall_time,
                                                                         const std::string& host) {
  std::string path =
      absl::StrFormat("%s/events.out.tfevents.%d.%s", dir, static_cast<int64_t>(wall_time), host);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  }
  std::unique_ptr<EventFileWriter> w(new EventFileWriter(f, path));
  tensorboard::Event version;
  version.set_wall_time(wall_time);
  version.set_file_version("brain.Event:2");
  absl::Status s = w->WriteRecord(version.SerializeAsString());
  if (!s.ok()) return s;
  return w;
}

EventFileWriter::~EventFileWriter() { std::fclose(file_); }

absl::Status EventFileWriter::WriteScalars(int64_t step, double wall_time,
                                           const std::map<std::string, double>& scalars) {
  tensorboard::Event e;
  e.set_wall_time(wall_time);
  e.set_step(step);
  tensorboard::Summary* summary = e.mutable_summary();
  for (const auto& [tag, v] : scalars) {
    tensorboard::Summary::Value* value = summary->add_value();
    value->set_tag(tag);
    value->set_simple_value(static_cast<float>(v));
  }
  return WriteRecord(e.SerializeAsString());
}

absl::Status EventFileWriter::WriteRecord(const std::string& data) {
  std::string framed = FrameRecord(data);
  if (std::fwrite(framed.data(), 1, framed.size(), file_) != framed.size() ||
      std::fflush(file_) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot write ", path_, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace rlforge::dashboard
