#include "weights/slot_markers.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "weights/shm_segment.h"

namespace rlforge {

struct SlotMarkerHeader {
  std::atomic<int64_t> version[2];
  int64_t pid;
};

namespace {

std::atomic<int64_t>& Marker(SlotMarkerHeader* h, int64_t version) {
  return h->version[version % 2];
}

}  // namespace

absl::StatusOr<std::unique_ptr<SlotMarkerWriter>> SlotMarkerWriter::Create(
    const std::string& name) {
  absl::StatusOr<MappedSegment> seg = CreateSegment(name, sizeof(SlotMarkerHeader));
  if (!seg.ok()) return seg.status();
  auto* h = new (seg->base) SlotMarkerHeader;
  h->version[0].store(-1);
  h->version[1].store(-1);
  h->pid = getpid();
  const std::string full = name.front() == '/' ? name : "/" + name;
  return std::unique_ptr<SlotMarkerWriter>(new SlotMarkerWriter(full, h));
}

SlotMarkerWriter::~SlotMarkerWriter() {
  munmap(header_, sizeof(SlotMarkerHeader));
  shm_unlink(name_.c_str());
}

void SlotMarkerWriter::BeginWrite(int64_t version) {
  Marker(header_, version).store(-1, std::memory_order_release);
}

void SlotMarkerWriter::EndWrite(int64_t version) {
  Marker(header_, version).store(version, std::memory_order_release);
}

absl::StatusOr<std::unique_ptr<SlotMarkerReader>> SlotMarkerReader::Open(const std::string& name) {
  absl::StatusOr<MappedSegment> seg =
      OpenSegment(name, /*writable=*/false,
                  "(weights.transport cuda_ipc needs the engines on the trainer's host)");
  if (!seg.ok()) return seg.status();
  if (seg->size < sizeof(SlotMarkerHeader)) {
    munmap(seg->base, seg->size);
    return absl::DataLossError(
        absl::StrCat(name, " holds ", seg->size, " bytes, not a slot-marker header"));
  }
  return std::unique_ptr<SlotMarkerReader>(
      new SlotMarkerReader(name, static_cast<SlotMarkerHeader*>(seg->base)));
}

SlotMarkerReader::~SlotMarkerReader() { munmap(header_, sizeof(SlotMarkerHeader)); }

absl::Status SlotMarkerReader::AwaitVersion(int64_t version, double timeout_s) {
  std::atomic<int64_t>& marker = Marker(header_, version);
  int64_t seen = -1;
  const auto failed = [&]() -> std::string {
    if (seen > version) {
      return absl::StrCat(name_, " holds version ", seen, " in version ", version,
                          "'s slot: the publisher moved on");
    }
    if (kill(static_cast<pid_t>(header_->pid), 0) != 0 && errno == ESRCH) {
      return absl::StrCat("the publisher of ", name_, " (pid ", header_->pid, ") exited");
    }
    return "";
  };
  return AwaitCondition(
      [&] {
        seen = marker.load(std::memory_order_acquire);
        return seen == version;
      },
      failed, timeout_s, absl::StrCat("version ", version, " was not published in ", name_));
}

absl::Status SlotMarkerReader::CheckStill(int64_t version) {
  const int64_t now = Marker(header_, version).load(std::memory_order_acquire);
  if (now == version) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(
      "version ", version, "'s slot in ", name_, " was rewritten while it was copied (it holds ",
      now == -1 ? std::string("a version being written") : absl::StrCat("version ", now),
      "): a torn read, refused"));
}

}  // namespace rlforge
