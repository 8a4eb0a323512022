#include "weights/shm_ring.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <bit>
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

constexpr char kMagic[8] = {'R', 'L', 'F', 'R', 'I', 'N', 'G', '2'};
constexpr uint64_t kWriting = ~0ull;
constexpr size_t kHeaderBytes = 4096;  // keeps the slots page-aligned

struct Slot {
  std::atomic<uint64_t> tag;    // 0: never written; kWriting; else Tag(publication, bucket)
  std::atomic<uint64_t> taken;  // bit r: reader r is done with the bucket in the slot
  int32_t readers;              // readers the bucket in the slot is for (bits 0..readers-1)
  int64_t version;              // the weight version the publication carries
  uint64_t nbytes;
  uint64_t checksum;
};

struct RingHeader {
  char magic[8];
  uint64_t bucket_bytes;
  int32_t publisher_pid;
  Slot slot[2];
};

// Publications count from 1, so a written tag is never 0 (never written).
uint64_t Tag(int64_t publication, int64_t bucket) {
  return (static_cast<uint64_t>(publication) << 24) | static_cast<uint64_t>(bucket);
}
int64_t TagPublication(uint64_t tag) { return static_cast<int64_t>(tag >> 24); }

uint64_t AllOf(int readers) { return readers >= 64 ? ~0ull : (1ull << readers) - 1; }

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
    s.taken.store(0);
    s.readers = 0;
  }
  return std::unique_ptr<ShmRingSink>(new ShmRingSink(shm, base, mapped, timeout_s));
}

ShmRingSink::~ShmRingSink() {
  munmap(base_, mapped_);
  shm_unlink(name_.c_str());
}

uint64_t ShmRingSink::GoneReaders(const std::vector<int>& pids) {
  uint64_t gone = 0;
  for (size_t r = 0; r < pids.size(); ++r) {
    if (pids[r] > 0 && kill(pids[r], 0) != 0 && errno == ESRCH) gone |= 1ull << r;
  }
  return gone;
}

absl::Status ShmRingSink::AwaitFree(int slot, const char* what) {
  Slot& s = HeaderOf(base_)->slot[slot];
  const uint64_t tag = s.tag.load(std::memory_order_acquire);
  if (tag == 0) return absl::OkStatus();
  const uint64_t all = AllOf(s.readers);
  // The bucket's readers are this publication's or, when one of them died before taking the
  // previous stream's last buckets, the previous publication's.
  const int64_t of = TagPublication(tag);
  const std::vector<int>* pids = of == publication_            ? &reader_pids_
                                 : of == previous_publication_ ? &previous_reader_pids_
                                                               : nullptr;
  uint64_t gone = 0;  // readers whose process is gone: they take nothing any more
  return AwaitCondition(
      [&] { return ((s.taken.load(std::memory_order_acquire) | gone) & all) == all; },
      [&] {  // every 5 ms
        if (pids != nullptr) gone = GoneReaders(*pids);
        return std::string();
      },
      timeout_s_,
      absl::StrCat("the rollout engines did not take bucket ", tag & 0xffffff,
                   " of weight version ", s.version, " (publication ", TagPublication(tag), "; ",
                   std::popcount(s.taken.load() & all), " of ", s.readers, " did) ", what));
}

absl::Status ShmRingSink::BeginPublication(int64_t publication, int readers,
                                           std::vector<int> reader_pids) {
  if (publication <= publication_) {
    // A reader waiting for this number could take an earlier stream's bucket for its own.
    return absl::FailedPreconditionError(
        absl::StrCat("weight publication ", publication, " after publication ", publication_,
                     " through ", name_, ": each stream needs a number above every earlier one"));
  }
  if (readers < 1 || readers > kMaxReaders ||
      (!reader_pids.empty() && reader_pids.size() != static_cast<size_t>(readers))) {
    return absl::InvalidArgumentError(absl::StrCat("weight publication ", publication, " for ",
                                                   readers, " readers (", reader_pids.size(),
                                                   " pids; at most ", kMaxReaders, ")"));
  }
  previous_publication_ = publication_;
  previous_reader_pids_ = std::move(reader_pids_);
  publication_ = publication;
  readers_ = readers;
  reader_pids_ = std::move(reader_pids);
  streamed_ = false;
  return absl::OkStatus();
}

absl::StatusOr<char*> ShmRingSink::Acquire(int64_t version, int64_t bucket) {
  const int slot = static_cast<int>(bucket % 2);
  Slot& s = HeaderOf(base_)->slot[slot];
  if (bucket == 0) {
    if (streamed_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "weight version ", version, " through ", name_, " without a publication of its own (",
          publication_ == 0 ? std::string("none begun")
                            : absl::StrCat("publication ", publication_, " streamed already"),
          "): BeginPublication first"));
    }
    streamed_ = true;
  }
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
  s.version = version;
  s.taken.store(0, std::memory_order_relaxed);
  s.tag.store(Tag(publication_, bucket), std::memory_order_release);
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
  if (publication_ <= 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("weight version ", version, " from ", name_,
                     " without the number of its publication (LoadWeights.publication)"));
  }
  RingHeader* h = HeaderOf(base_);
  Slot& s = h->slot[bucket % 2];
  const uint64_t want = Tag(publication_, bucket);
  const int pid = h->publisher_pid;
  // An earlier publication's tag (or none) in the slot: not yet.
  absl::Status st = AwaitCondition(
      [&] {
        const uint64_t t = s.tag.load(std::memory_order_acquire);
        return t == want || (t != kWriting && t != 0 && TagPublication(t) > publication_);
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
        absl::StrCat("the ring already holds publication ", TagPublication(s.tag.load()),
                     " (weight version ", s.version, "), past publication ", publication_,
                     ": this engine was not counted among its readers"));
  }
  if (reader_ < 0 || reader_ >= s.readers) {
    return absl::FailedPreconditionError(absl::StrCat("reader ", reader_, " of publication ",
                                                      publication_, ", which has ", s.readers,
                                                      " readers"));
  }
  if (s.version != version) {
    return absl::FailedPreconditionError(absl::StrCat(
        "publication ", publication_, " carries weight version ", s.version, ", not ", version));
  }
  if (s.nbytes > h->bucket_bytes) {
    return absl::DataLossError(absl::StrCat("slot header claims ", s.nbytes, " bytes"));
  }
  return Bucket{SlotData(base_, static_cast<int>(bucket % 2)), s.nbytes, s.checksum};
}

absl::Status ShmRingSource::Release(int64_t version, int64_t bucket) {
  (void)version;
  HeaderOf(base_)->slot[bucket % 2].taken.fetch_or(1ull << reader_, std::memory_order_acq_rel);
  return absl::OkStatus();
}

}  // namespace rlforge
