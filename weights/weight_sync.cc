#include "weights/weight_sync.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "weights/shm_segment.h"

namespace rlforge {

namespace {

constexpr char kMagic[8] = {'R', 'L', 'F', 'W', 'G', 'T', '0', '1'};

struct Header {
  char magic[8];
  uint64_t layout_hash;
  uint64_t nbytes;
  std::atomic<int64_t> slot_version[2];
  uint64_t slot_checksum[2];
};

constexpr size_t kHeaderBytes = 4096;  // keeps slot data page-aligned

char* SlotData(void* base, int slot, size_t nbytes) {
  return static_cast<char*>(base) + kHeaderBytes + static_cast<size_t>(slot) * nbytes;
}

}  // namespace

uint64_t WeightChecksum(const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t h = 0x9e3779b97f4a7c15ull ^ size;
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 29;
  }
  for (; i < size; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

WeightPublisher::WeightPublisher(std::string name, void* base, size_t mapped, size_t nbytes,
                                 uint64_t layout)
    : name_(std::move(name)), base_(base), mapped_(mapped), nbytes_(nbytes), layout_hash_(layout) {}

WeightPublisher::WeightPublisher(WeightPublisher&& o) noexcept
    : name_(std::move(o.name_)),
      base_(o.base_),
      mapped_(o.mapped_),
      nbytes_(o.nbytes_),
      layout_hash_(o.layout_hash_) {
  o.base_ = nullptr;
  o.name_.clear();
}

WeightPublisher::~WeightPublisher() {
  if (base_ != nullptr) munmap(base_, mapped_);
  if (!name_.empty()) shm_unlink(name_.c_str());
}

absl::StatusOr<WeightPublisher> WeightPublisher::Create(const std::string& name, size_t nbytes,
                                                        uint64_t layout_hash) {
  std::string shm = absl::StartsWith(name, "/") ? name : "/" + name;
  const size_t mapped = kHeaderBytes + 2 * nbytes;
  ASSIGN_OR_RETURN(const MappedSegment seg, CreateSegment(shm, mapped));
  void* base = seg.base;
  auto* h = new (base) Header();
  std::memcpy(h->magic, kMagic, sizeof kMagic);
  h->layout_hash = layout_hash;
  h->nbytes = nbytes;
  h->slot_version[0].store(-1);
  h->slot_version[1].store(-1);
  return WeightPublisher(shm, base, mapped, nbytes, layout_hash);
}

proto::WeightsReady WeightPublisher::Publish(int64_t version, const void* data) {
  std::memcpy(BeginWrite(version), data, nbytes_);
  return EndWrite(version);
}

char* WeightPublisher::BeginWrite(int64_t version) {
  auto* h = static_cast<Header*>(base_);
  const int slot = static_cast<int>(version & 1);
  h->slot_version[slot].store(-1, std::memory_order_release);
  return SlotData(base_, slot, nbytes_);
}

proto::WeightsReady WeightPublisher::EndWrite(int64_t version) {
  auto* h = static_cast<Header*>(base_);
  const int slot = static_cast<int>(version & 1);
  const uint64_t sum = WeightChecksum(SlotData(base_, slot, nbytes_), nbytes_);
  h->slot_checksum[slot] = sum;
  h->slot_version[slot].store(version, std::memory_order_release);
  proto::WeightsReady r;
  r.set_version(version);
  r.set_location("shm:" + name_);
  r.set_nbytes(nbytes_);
  r.set_checksum(sum);
  r.set_layout_hash(layout_hash_);
  return r;
}

WeightReader::~WeightReader() {
  if (base_ != nullptr) munmap(base_, mapped_);
}

absl::Status WeightReader::Map(const std::string& name) {
  if (base_ != nullptr && name == name_) return absl::OkStatus();
  if (base_ != nullptr) munmap(base_, mapped_);
  base_ = nullptr;
  ASSIGN_OR_RETURN(
      const MappedSegment seg,
      OpenSegment(name, false, "is the trainer on another host? use weights.transport: zmq"));
  base_ = seg.base;
  mapped_ = seg.size;
  name_ = name;
  return absl::OkStatus();
}

absl::Status WeightReader::Read(const proto::WeightsReady& ready, uint64_t expected_layout,
                                void* out) {
  if (!absl::StartsWith(ready.location(), "shm:")) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a shared-memory location: ", ready.location()));
  }
  std::string name = ready.location().substr(4);
  if (absl::Status s = Map(name); !s.ok()) return s;
  const auto* h = static_cast<const Header*>(base_);
  if (mapped_ < kHeaderBytes || std::memcmp(h->magic, kMagic, sizeof kMagic) != 0) {
    return absl::DataLossError(absl::StrCat(name, " is not an rlforge weight segment"));
  }
  if (h->layout_hash != expected_layout || ready.layout_hash() != expected_layout) {
    return absl::FailedPreconditionError(
        absl::StrCat("weights in ", name, " are for another model layout (hash ", h->layout_hash,
                     ", this model ", expected_layout, "): trainer and rollout configs differ"));
  }
  if (h->nbytes != ready.nbytes() || kHeaderBytes + 2 * h->nbytes > mapped_) {
    return absl::DataLossError(
        absl::StrCat(name, ": size ", h->nbytes, " != announced ", ready.nbytes()));
  }
  int slot = static_cast<int>(ready.version() & 1);
  int64_t before = h->slot_version[slot].load(std::memory_order_acquire);
  if (before != ready.version()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "weight version ", ready.version(), " is not in ", name, " (its slot holds ", before, ")"));
  }
  std::memcpy(out, SlotData(base_, slot, h->nbytes), h->nbytes);
  int64_t after = h->slot_version[slot].load(std::memory_order_acquire);
  if (after != ready.version()) {
    return absl::AbortedError(
        absl::StrCat("weight version ", ready.version(), " was overwritten while being read"));
  }
  uint64_t sum = WeightChecksum(out, h->nbytes);
  if (sum != ready.checksum()) {
    return absl::DataLossError(
        absl::StrCat("weight version ", ready.version(), " from ", name, ": checksum mismatch"));
  }
  return absl::OkStatus();
}

proto::WeightsReady InlineWeights(int64_t version, const std::vector<float>& flat,
                                  uint64_t layout_hash) {
  proto::WeightsReady w;
  w.set_version(version);
  w.set_location("inline");
  w.set_nbytes(flat.size() * sizeof(float));
  w.set_checksum(WeightChecksum(flat.data(), flat.size() * sizeof(float)));
  w.set_layout_hash(layout_hash);
  return w;
}

}  // namespace rlforge
