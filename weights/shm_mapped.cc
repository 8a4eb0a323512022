#include "weights/shm_mapped.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/status.h"
#include "weights/shm_segment.h"

namespace rlforge {

namespace {

constexpr char kMagic[8] = {'R', 'L', 'F', 'M', 'A', 'P', 'D', '1'};
constexpr int kMaxReaders = MappedSource::kMaxReaders;

struct ReaderEntry {
  std::atomic<int32_t> pid;     // 0: free
  std::atomic<uint32_t> slots;  // bit s: this engine's parameters (may) point into slot s
  char name[56];
};

// A bucket's check is shared: engines map the same physical pages, so one engine's checksum of
// them holds for all. verdict: Verdict(version, state), or 0 (none since the bucket was written).
enum : uint64_t { kChecking = 1, kPassed = 2, kFailed = 3 };
uint64_t Verdict(int64_t version, uint64_t state) {
  return (static_cast<uint64_t>(version + 1) << 2) | state;
}

}  // namespace

struct BucketState {
  std::atomic<int64_t> tag;  // the version whose bucket this is; -1: none, or being written
  std::atomic<uint64_t> checksum;
  std::atomic<uint64_t> verdict;
  std::atomic<int32_t> checker;  // pid of the engine checking it
  std::atomic<uint64_t> read;    // the checksum it read
};

// The segment's first header_bytes; the two slots follow, slot_stride apart.
struct MappedLayout {
  char magic[8];
  uint64_t total_bytes, bucket_bytes, buckets, slot_stride, header_bytes;
  int32_t publisher_pid;
  std::atomic<int64_t> slot_version[2];  // set before the slot's first byte changes; -1: none
  ReaderEntry readers[kMaxReaders];

  BucketState& bucket(int64_t slot, int64_t b) {
    return reinterpret_cast<BucketState*>(this + 1)[slot * static_cast<int64_t>(buckets) + b];
  }
  uint64_t bytes_of(int64_t b) const {
    return std::min(bucket_bytes, total_bytes - static_cast<uint64_t>(b) * bucket_bytes);
  }
};

namespace {

uint64_t RoundUp(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }
uint64_t PageSize() { return static_cast<uint64_t>(sysconf(_SC_PAGESIZE)); }

bool ProcessGone(int32_t pid) { return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH; }

// The live engines counted on `slot`: "rollout-1 (pid 42), ..." ("" when none).
std::string Holders(MappedLayout& h, int slot) {
  std::string out;
  for (ReaderEntry& r : h.readers) {
    const int32_t pid = r.pid.load(std::memory_order_seq_cst);
    if (pid == 0 || (r.slots.load(std::memory_order_seq_cst) & (1u << slot)) == 0) continue;
    if (ProcessGone(pid)) continue;  // a killed engine serves nothing
    absl::StrAppend(&out, out.empty() ? "" : ", ", std::string(r.name, strnlen(r.name, 56)),
                    " (pid ", pid, ")");
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MappedSink>> MappedSink::Create(const std::string& name,
                                                               const proto::WeightManifest& m,
                                                               double timeout_s, Mapping mapping) {
  if (m.dtype() != "float32") {
    return absl::InvalidArgumentError(absl::StrCat(
        "weights.apply: mapped serves the engines' fp32 parameters from the stream's own bytes; "
        "weights.dtype is ",
        m.dtype(), " (use float32)"));
  }
  const std::string shm = absl::StartsWith(name, "/") ? name : "/" + name;
  const uint64_t page = PageSize();
  const uint64_t buckets = static_cast<uint64_t>(BucketCount(m));
  const uint64_t header_bytes =
      RoundUp(sizeof(MappedLayout) + 2 * buckets * sizeof(BucketState), page);
  const uint64_t stride = RoundUp(std::max<uint64_t>(m.total_bytes(), 1), page);
  absl::StatusOr<MappedSegment> seg = CreateSegment(shm, header_bytes + 2 * stride);
  if (!seg.ok()) return seg.status();
  char* slots = static_cast<char*>(seg->base) + header_bytes;
  if (mapping == Mapping::kBucketWindows) {  // mapped bucket by bucket as each is written
    munmap(slots, 2 * stride);
    slots = nullptr;
  }
  const int fd = shm_open(shm.c_str(), O_RDWR, 0);
  if (fd < 0) {
    munmap(seg->base, header_bytes + (slots != nullptr ? 2 * stride : 0));
    shm_unlink(shm.c_str());
    return absl::UnavailableError(absl::StrCat("shm_open ", shm, ": ", std::strerror(errno)));
  }
  auto* h = new (seg->base) MappedLayout();
  std::memcpy(h->magic, kMagic, sizeof kMagic);
  h->total_bytes = m.total_bytes();
  h->bucket_bytes = m.bucket_bytes();
  h->buckets = buckets;
  h->slot_stride = stride;
  h->header_bytes = header_bytes;
  h->publisher_pid = getpid();
  for (int s = 0; s < 2; ++s) {
    h->slot_version[s].store(-1);
    for (uint64_t b = 0; b < buckets; ++b) {
      new (&h->bucket(s, static_cast<int64_t>(b))) BucketState();
      h->bucket(s, static_cast<int64_t>(b)).tag.store(-1);
    }
  }
  for (ReaderEntry& r : h->readers) {
    r.pid.store(0);
    r.slots.store(0);
  }
  return std::unique_ptr<MappedSink>(new MappedSink(shm, fd, h, slots, timeout_s));
}

MappedSink::~MappedSink() {
  Unmap();
  if (slots_ != nullptr) munmap(slots_, 2 * header_->slot_stride);
  munmap(header_, header_->header_bytes);
  close(fd_);
  shm_unlink(name_.c_str());
}

void MappedSink::Unmap() {
  if (window_ != nullptr) munmap(window_, window_size_);
  window_ = nullptr;
}

absl::Status MappedSink::AwaitSlot(int64_t version) {
  const int slot = static_cast<int>(version % 2);
  // Claimed before the wait (Hold reads it after counting itself): an engine either sees it and
  // backs off, or is seen by the wait below.
  header_->slot_version[slot].store(version, std::memory_order_seq_cst);
  absl::Status s = AwaitCondition([&] { return Holders(*header_, slot).empty(); },
                                  [] { return std::string(); }, timeout_s_, "");
  if (s.code() != absl::StatusCode::kDeadlineExceeded) return s;
  return absl::DeadlineExceededError(absl::StrCat(
      "weight version ", version, " cannot be written into its shared-memory slot ", slot,
      ": engine(s) ", Holders(*header_, slot), " still serve an older version from it after ",
      timeout_s_, " s (weights.timeout_s)"));
}

absl::StatusOr<char*> MappedSink::Acquire(int64_t version, int64_t bucket) {
  if (bucket == 0) {
    if (version <= last_version_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "weight version ", version, " after version ", last_version_, " through ", name_,
          ": versions go through the mapped segment once each, in increasing order"));
    }
    last_version_ = version;
    RETURN_IF_ERROR(AwaitSlot(version));
  } else if (version != last_version_) {
    return absl::InternalError(absl::StrCat("bucket ", bucket, " of weight version ", version,
                                            " while version ", last_version_, " is written"));
  }
  const int64_t slot = version % 2;
  BucketState& st = header_->bucket(slot, bucket);
  st.tag.store(-1, std::memory_order_relaxed);  // seqlock: "being written" before any byte
  st.verdict.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  acquired_ = bucket;
  const uint64_t in_slots = static_cast<uint64_t>(slot) * header_->slot_stride +
                            static_cast<uint64_t>(bucket) * header_->bucket_bytes;
  if (slots_ != nullptr) return slots_ + in_slots;
  Unmap();
  const uint64_t page = PageSize();
  const uint64_t at = header_->header_bytes + in_slots;
  const uint64_t from = at / page * page;
  const uint64_t size = RoundUp(at + header_->bytes_of(bucket) - from, page);
  // MAP_POPULATE: the pages come in one call rather than a fault per page as they are written.
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd_,
                 static_cast<off_t>(from));
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("mmap bucket ", bucket, " of ", name_, ": ", std::strerror(errno)));
  }
  window_ = static_cast<char*>(p);
  window_size_ = size;
  return window_ + (at - from);
}

absl::Status MappedSink::Commit(int64_t version, int64_t bucket, uint64_t nbytes,
                                uint64_t checksum) {
  if (version != last_version_ || bucket != acquired_ || nbytes != header_->bytes_of(bucket)) {
    return absl::InternalError(absl::StrCat("commit of bucket ", bucket, " of weight version ",
                                            version, " (", nbytes,
                                            " bytes) that was not acquired"));
  }
  BucketState& st = header_->bucket(version % 2, bucket);
  st.checksum.store(checksum, std::memory_order_relaxed);
  st.tag.store(version, std::memory_order_release);
  acquired_ = -1;
  Unmap();
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<MappedSource>> MappedSource::Open(const std::string& location,
                                                                 const std::string& who,
                                                                 double timeout_s) {
  if (!absl::StartsWith(location, "shm-mapped:")) {
    return absl::InvalidArgumentError(absl::StrCat("not a mapped weight segment: ", location));
  }
  const std::string name = location.substr(11);
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot open shared memory ", name, ": ", std::strerror(errno),
                     " (weights.apply: mapped serves engines on the trainer's host only)"));
  }
  struct stat st;
  fstat(fd, &st);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const uint64_t page = PageSize();
  auto bad = [&] {
    close(fd);
    return absl::DataLossError(absl::StrCat(name, " is not an rlforge mapped weight segment"));
  };
  if (size < RoundUp(sizeof(MappedLayout), page)) return bad();
  void* first = mmap(nullptr, page, PROT_READ, MAP_SHARED, fd, 0);
  if (first == MAP_FAILED) return bad();
  const auto* peek = static_cast<const MappedLayout*>(first);
  const bool ok = std::memcmp(peek->magic, kMagic, sizeof kMagic) == 0 &&
                  peek->header_bytes + 2 * peek->slot_stride == size;
  const uint64_t header_bytes = peek->header_bytes, stride = peek->slot_stride;
  munmap(first, page);
  if (!ok) return bad();
  void* header = mmap(nullptr, header_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  void* slots =
      mmap(nullptr, 2 * stride, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(header_bytes));
  close(fd);
  if (header == MAP_FAILED || slots == MAP_FAILED) {
    if (header != MAP_FAILED) munmap(header, header_bytes);
    if (slots != MAP_FAILED) munmap(slots, 2 * stride);
    return absl::UnavailableError(absl::StrCat("mmap ", name, ": ", std::strerror(errno)));
  }
  auto* h = static_cast<MappedLayout*>(header);
  const int32_t me = getpid();
  for (int i = 0; i < kMaxReaders; ++i) {
    ReaderEntry& r = h->readers[i];
    int32_t pid = r.pid.load();
    if ((pid == 0 || ProcessGone(pid)) && r.pid.compare_exchange_strong(pid, me)) {
      r.slots.store(0);
      std::memset(r.name, 0, sizeof r.name);
      std::memcpy(r.name, who.data(), std::min(who.size(), sizeof r.name - 1));
      return std::unique_ptr<MappedSource>(new MappedSource(
          h, header_bytes, static_cast<const char*>(slots), 2 * stride, i, who, timeout_s));
    }
  }
  munmap(header, header_bytes);
  munmap(slots, 2 * stride);
  return absl::ResourceExhaustedError(
      absl::StrCat(who, ": ", kMaxReaders, " engines already map ", name, " (the most it counts)"));
}

MappedSource::~MappedSource() {
  ReaderEntry& r = header_->readers[reader_];
  r.slots.store(0);
  r.pid.store(0);
  munmap(const_cast<char*>(slots_), slots_size_);
  munmap(header_, header_size_);
}

std::pair<const char*, const char*> MappedSource::SlotRange(int64_t version) const {
  const char* begin = slots_ + static_cast<uint64_t>(version % 2) * header_->slot_stride;
  return {begin, begin + header_->total_bytes};
}

// The checksum of bucket `st` of `version` (its bytes: data, n) as read in the segment: this
// engine's, or the one another engine read (waiting for it while it reads).
absl::StatusOr<uint64_t> MappedSource::SharedChecksum(BucketState& st, int64_t version,
                                                      const char* data, uint64_t n,
                                                      uint64_t published) {
  const Stopwatch timer;
  while (true) {
    if (timer.Seconds() > timeout_s_) {  // a deadline on the whole exchange, too
      return absl::DeadlineExceededError(absl::StrCat("no checksum could be settled within ",
                                                      timeout_s_, " s (weights.timeout_s)"));
    }
    uint64_t v = st.verdict.load(std::memory_order_acquire);
    if (v == Verdict(version, kPassed) || v == Verdict(version, kFailed)) {
      const uint64_t read = st.read.load(std::memory_order_relaxed);
      if (st.tag.load(std::memory_order_acquire) != version) break;
      return read;
    }
    if (v == Verdict(version, kChecking)) {
      const int32_t checker = st.checker.load();
      RETURN_IF_ERROR(AwaitCondition(
          [&] { return st.verdict.load(std::memory_order_acquire) != v || ProcessGone(checker); },
          [] { return std::string(); }, timeout_s_,
          absl::StrCat("the engine checking it (pid ", checker, ") did not finish")));
      // A checker that died leaves the check to the next engine that claims it.
      if (st.verdict.load() == v && ProcessGone(checker)) st.verdict.compare_exchange_strong(v, 0);
      continue;
    }
    if (!st.verdict.compare_exchange_strong(v, Verdict(version, kChecking))) continue;
    st.checker.store(getpid());
    const uint64_t read = BucketChecksum(data, n);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (st.tag.load(std::memory_order_relaxed) != version) break;  // rewritten while hashed
    st.read.store(read, std::memory_order_relaxed);
    st.verdict.store(Verdict(version, read == published ? kPassed : kFailed),
                     std::memory_order_release);
    return read;
  }
  return absl::FailedPreconditionError("a newer version took its slot meanwhile");
}

absl::StatusOr<const char*> MappedSource::Check(const proto::WeightManifest& m, int64_t version,
                                                ReadStats* stats) {
  const Stopwatch timer;
  const int64_t count = BucketCount(m);
  if (m.dtype() != "float32" || m.total_bytes() != header_->total_bytes ||
      m.bucket_bytes() != header_->bucket_bytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        who_, ": the weight stream (", m.dtype(), ", ", m.total_bytes(), " bytes in buckets of ",
        m.bucket_bytes(), ") is not the mapped segment's (float32, ", header_->total_bytes,
        " bytes in buckets of ", header_->bucket_bytes, ")"));
  }
  const int64_t slot = version % 2;
  const char* base = SlotRange(version).first;
  const int32_t publisher = header_->publisher_pid;
  auto fail = [&](int64_t b, const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat(who_, " could not load weight version ", version,
                                               ": bucket ", b, " of ", count, ": ", s.message()));
  };
  for (int64_t b = 0; b < count; ++b) {
    BucketState& st = header_->bucket(slot, b);
    absl::Status waited = AwaitCondition(
        [&] { return st.tag.load(std::memory_order_acquire) >= version; },
        [&] {
          return ProcessGone(publisher)
                     ? absl::StrCat("the publisher (pid ", publisher, ") exited mid-transfer")
                     : std::string();
        },
        timeout_s_, "the publisher did not write it");
    if (!waited.ok()) return fail(b, waited);
    if (const int64_t t = st.tag.load(std::memory_order_acquire); t != version) {
      return fail(
          b, absl::FailedPreconditionError(absl::StrCat("version ", t, " took its slot first")));
    }
    const uint64_t published = st.checksum.load(std::memory_order_relaxed);
    const uint64_t n = header_->bytes_of(b);
    absl::StatusOr<uint64_t> read = SharedChecksum(
        st, version, base + static_cast<uint64_t>(b) * m.bucket_bytes(), n, published);
    if (!read.ok()) return fail(b, read.status());
    if (*read != published) {
      return absl::DataLossError(
          absl::StrCat(who_, " refused weight version ", version, ": bucket ", b, " of ", count,
                       " failed its checksum (", *read, " read, ", published, " published)"));
    }
    stats->bytes += n;
    ++stats->buckets;
  }
  stats->seconds = timer.Seconds();
  return base;
}

absl::Status MappedSource::Hold(int64_t version) {
  const uint32_t bit = 1u << (version % 2);
  ReaderEntry& r = header_->readers[reader_];
  const uint32_t before = r.slots.fetch_or(bit, std::memory_order_seq_cst);
  const int64_t now = header_->slot_version[version % 2].load(std::memory_order_seq_cst);
  if (now == version) return absl::OkStatus();
  if ((before & bit) == 0) r.slots.fetch_and(~bit, std::memory_order_seq_cst);
  return absl::FailedPreconditionError(
      absl::StrCat(who_, " could not load weight version ", version, ": version ", now,
                   " took its shared-memory slot after it was checked"));
}

void MappedSource::Serve(int64_t version) {
  header_->readers[reader_].slots.store(1u << (version % 2), std::memory_order_seq_cst);
}

void MappedSource::Release() {
  header_->readers[reader_].slots.store(0, std::memory_order_seq_cst);
}

}  // namespace rlforge
