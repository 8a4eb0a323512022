#include "weights/shm_ring.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "weights/shm_segment.h"

namespace rlforge {

namespace {

constexpr char kMagic[8] = {'R', 'L', 'F', 'R', 'I', 'N', 'G', '1'};
constexpr uint64_t kWriting = ~0ull;
constexpr size_t kHeaderBytes = 4096;  // keeps the slots page-aligned

struct Slot {
  std::atomic<uint64_t> tag;  // 0: never written; kWriting; else Tag(version, bucket)
  std::atomic<int32_t> acks;  // readers done with the bucket in the slot
  int32_t readers;            // readers the bucket in the slot is for
  uint64_t nbytes;
  uint64_t checksum;
};

struct RingHeader {
  char magic[8];
  uint64_t bucket_bytes;
  int32_t publisher_pid;
  Slot slot[2];
};

uint64_t Tag(int64_t version, int64_t bucket) {
  return (static_cast<uint64_t>(version + 1) << 24) | static_cast<uint64_t>(bucket);
}
int64_t TagVersion(uint64_t tag) { return static_cast<int64_t>(tag >> 24) - 1; }

RingHeader* HeaderOf(void* base) { return static_cast<RingHeader*>(base); }
char* SlotData(void* base, int slot) {
  return static_cast<char*>(base) + kHeaderBytes +
         static_cast<size_t>(slot) * HeaderOf(base)->bucket_bytes;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShmRingSink>> ShmRingSink::Create(const std::string& name,
                                                                 uint64_t bucket_bytes,
                                                                 double timeout_s) {
  const std::string shm = absl::StartsWith(name, "/") ? name : "/" + name;
  const size_t mapped = kHeaderBytes + 2 * bucket_bytes;
  absl::StatusOr<MappedSegment> seg = CreateSegment(shm, mapped);
  if (!seg.ok()) return seg.status();
  void* base = seg->base;
  auto* h = new (base) RingHeader();
  std::memcpy(h->magic, kMagic, sizeof kMagic);
  h->bucket_bytes = bucket_bytes;
  h->publisher_pid = getpid();
  for (Slot& s : h->slot) {
    s.tag.store(0);
    s.acks.store(0);
  }
  return std::unique_ptr<ShmRingSink>(new ShmRingSink(shm, base, mapped, timeout_s));
}

ShmRingSink::~ShmRingSink() {
  munmap(base_, mapped_);
  shm_unlink(name_.c_str());
}

absl::Status ShmRingSink::AwaitFree(int slot, const char* what) {
  Slot& s = HeaderOf(base_)->slot[slot];
  const uint64_t tag = s.tag.load(std::memory_order_acquire);
  if (tag == 0) return absl::OkStatus();
  return AwaitCondition([&] { return s.acks.load(std::memory_order_acquire) >= s.readers; },
                        [] { return std::string(); }, timeout_s_,
                        absl::StrCat("the rollout engines did not take bucket ", tag & 0xffffff,
                                     " of weight version ", TagVersion(tag), " (", s.acks.load(),
                                     " of ", s.readers, " did) ", what));
}

absl::StatusOr<char*> ShmRingSink::Acquire(int64_t version, int64_t bucket) {
  const int slot = static_cast<int>(bucket % 2);
  Slot& s = HeaderOf(base_)->slot[slot];
  if (bucket == 0 && version <= last_version_) {
    // A reader arriving before the publisher would take the old copy for the new one.
    return absl::FailedPreconditionError(
        absl::StrCat("weight version ", version, " after version ", last_version_, " through ",
                     name_, ": versions go through the ring once each, in increasing order"));
  }
  last_version_ = version;
  if (absl::Status st = AwaitFree(slot, "before it was needed again"); !st.ok()) return st;
  s.tag.store(kWriting, std::memory_order_release);
  return SlotData(base_, slot);
}

absl::Status ShmRingSink::Commit(int64_t version, int64_t bucket, uint64_t nbytes,
                                 uint64_t checksum) {
  Slot& s = HeaderOf(base_)->slot[bucket % 2];
  s.nbytes = nbytes;
  s.checksum = checksum;
  s.readers = readers_;
  s.acks.store(0, std::memory_order_relaxed);
  s.tag.store(Tag(version, bucket), std::memory_order_release);
  return absl::OkStatus();
}

absl::Status ShmRingSink::Drain() {
  for (int slot = 0; slot < 2; ++slot) {
    if (absl::Status s = AwaitFree(slot, "before the version ended"); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ShmRingSource>> ShmRingSource::Open(const std::string& location,
                                                                   double timeout_s) {
  if (!absl::StartsWith(location, "shm-ring:")) {
    return absl::InvalidArgumentError(absl::StrCat("not a shared-memory ring: ", location));
  }
  const std::string name = location.substr(9);
  absl::StatusOr<MappedSegment> seg =
      OpenSegment(name, true, "is the trainer on another host? use weights.transport: gloo");
  if (!seg.ok()) return seg.status();
  void* base = seg->base;
  const size_t mapped = seg->size;
  if (mapped < kHeaderBytes) {
    munmap(base, mapped);
    return absl::DataLossError(absl::StrCat(name, " is not an rlforge weight ring"));
  }
  const RingHeader* h = HeaderOf(base);
  if (std::memcmp(h->magic, kMagic, sizeof kMagic) != 0 ||
      kHeaderBytes + 2 * h->bucket_bytes > mapped) {
    munmap(base, mapped);
    return absl::DataLossError(absl::StrCat(name, " is not an rlforge weight ring"));
  }
  return std::unique_ptr<ShmRingSource>(new ShmRingSource(name, base, mapped, timeout_s));
}

ShmRingSource::~ShmRingSource() { munmap(base_, mapped_); }

absl::StatusOr<BucketSource::Bucket> ShmRingSource::Next(int64_t version, int64_t bucket) {
  RingHeader* h = HeaderOf(base_);
  Slot& s = h->slot[bucket % 2];
  const uint64_t want = Tag(version, bucket);
  const int pid = h->publisher_pid;
  absl::Status st = AwaitCondition(
      [&] {
        const uint64_t t = s.tag.load(std::memory_order_acquire);
        return t == want || (t != kWriting && t != 0 && TagVersion(t) > version);
      },
      [&] {
        if (kill(pid, 0) != 0 && errno == ESRCH) {
          return absl::StrCat("the publisher (pid ", pid, ") exited mid-transfer");
        }
        return std::string();
      },
      timeout_s_, "the publisher did not write it");
  if (!st.ok()) return st;
  if (s.tag.load(std::memory_order_acquire) != want) {
    return absl::FailedPreconditionError(
        absl::StrCat("the ring already holds version ", TagVersion(s.tag.load()),
                     ": this engine was not counted among the readers"));
  }
  if (s.nbytes > h->bucket_bytes) {
    return absl::DataLossError(absl::StrCat("slot header claims ", s.nbytes, " bytes"));
  }
  return Bucket{SlotData(base_, static_cast<int>(bucket % 2)), s.nbytes, s.checksum};
}

absl::Status ShmRingSource::Release(int64_t version, int64_t bucket) {
  (void)version;
  HeaderOf(base_)->slot[bucket % 2].acks.fetch_add(1, std::memory_order_acq_rel);
  return absl::OkStatus();
}

}  // namespace rlforge
