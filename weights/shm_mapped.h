// The zero-copy same-host path of the weight plane (weights.apply: mapped): a POSIX
// shared-memory segment holding two whole versions, which the engines serve from directly.
//
// MappedSink (trainer rank 0): version v -> slot v % 2: waits until no engine serves from it ->
//   each bucket written in place (only its window mapped) -> its tag (v) and checksum, release
// MappedSource (each engine): Check(v): each bucket's tag, then its checksum in place (no copy)
//   while the next bucket is written (computed once per bucket by whichever engine comes first,
//   the others taking its verdict: they read the same pages) -> Hold(v): slot v % 2 counted as this
//   engine's -> the engine points its parameters into the slot -> Serve(v): the other slot is let
//   go
//
// Invariants: a slot is overwritten only once no live engine holds it (the publisher's wait has
// weights.timeout_s as its deadline and names the engines that still hold it; engines whose
// process is gone hold nothing). A bucket's tag is -1 while it is written (a seqlock: a reader
// checks the tag again after hashing), and the slot's version is set before its first byte
// changes, so an engine's Hold fails rather than serve a slot a newer version took.
// Versions go through the segment once each, in increasing order. fp32 on the wire only (the
// engine's parameters are the wire bytes). The sink owns and unlinks the segment. Same host
// only. One thread per object; any number of readers in any processes.
#pragma once

#include <memory>
#include <string>

#include "weights/bucket_stream.h"

namespace rlforge {

struct MappedLayout;
struct BucketState;

class MappedSink final : public BucketSink {
 public:
  // How the publisher maps the slots it writes. kWholeSegment: both slots, for good (their
  // pages count in its RSS once written: two versions, which the segment holds anyway).
  // kBucketWindows: only the bucket being written (its RSS stays within its model + 2 buckets)
  // at the price of mapping and unmapping every page of every version (bench/weight_sync_bench.md
  // measures both).
  enum class Mapping { kWholeSegment, kBucketWindows };
  // Creates "/<name>" for versions of manifest `m` (float32): a header and two slots of
  // m.total_bytes(). Readers registered at most kMaxReaders at once.
  static absl::StatusOr<std::unique_ptr<MappedSink>> Create(
      const std::string& name, const proto::WeightManifest& m, double timeout_s,
      Mapping mapping = Mapping::kWholeSegment);
  ~MappedSink() override;
  std::string location() const { return "shm-mapped:" + name_; }

  // Bucket 0 of a version first waits until no engine serves from its slot.
  absl::StatusOr<char*> Acquire(int64_t version, int64_t bucket) override;
  absl::Status Commit(int64_t version, int64_t bucket, uint64_t nbytes, uint64_t checksum) override;
  // Nothing to drain: the buckets stay in their slot for the engines to serve.
  absl::Status Drain() override { return absl::OkStatus(); }

 private:
  MappedSink(std::string name, int fd, MappedLayout* header, char* slots, double timeout_s)
      : name_(std::move(name)), fd_(fd), header_(header), slots_(slots), timeout_s_(timeout_s) {}
  absl::Status AwaitSlot(int64_t version);
  void Unmap();

  std::string name_;
  int fd_;
  MappedLayout* header_;
  char* slots_;  // kWholeSegment: both slots, read-write; else null
  double timeout_s_;
  int64_t last_version_ = -1;
  int64_t acquired_ = -1;   // the bucket being written, or -1
  char* window_ = nullptr;  // kBucketWindows: its page-aligned mapping
  size_t window_size_ = 0;
};

class MappedSource {
 public:
  static constexpr int kMaxReaders = 128;
  // Maps `location` ("shm-mapped:/name"): the header read-write (to count this engine), the
  // slots read-only. `who` (the engine's actor id) names it in the publisher's errors.
  static absl::StatusOr<std::unique_ptr<MappedSource>> Open(const std::string& location,
                                                            const std::string& who,
                                                            double timeout_s);
  ~MappedSource();  // holds nothing any more

  // Waits for every bucket of `version` and checks each in place. Success: the slot's first
  // byte (tensor t at base + t.offset()); the slot is not held yet. An error names `who`, the
  // version and the bucket; nothing this engine serves is touched.
  absl::StatusOr<const char*> Check(const proto::WeightManifest& m, int64_t version,
                                    ReadStats* stats);
  // Counts this engine as serving from `version`'s slot too. Fails (holding nothing new) when a
  // newer version has taken the slot since Check.
  absl::Status Hold(int64_t version);
  // Once the engine's parameters point into `version`'s slot: it holds that slot only.
  void Serve(int64_t version);
  // Holds no slot (a reader that copied its version out: weights/policy_plane.h).
  void Release();
  // The slot of `version`: [begin, end) of the read-only mapping.
  std::pair<const char*, const char*> SlotRange(int64_t version) const;

 private:
  MappedSource(MappedLayout* header, size_t header_size, const char* slots, size_t slots_size,
               int reader, std::string who, double timeout_s)
      : header_(header),
        header_size_(header_size),
        slots_(slots),
        slots_size_(slots_size),
        reader_(reader),
        who_(std::move(who)),
        timeout_s_(timeout_s) {}

  absl::StatusOr<uint64_t> SharedChecksum(BucketState& st, int64_t version, const char* data,
                                          uint64_t n, uint64_t published);

  MappedLayout* header_;
  size_t header_size_;
  const char* slots_;
  size_t slots_size_;
  int reader_;  // this engine's entry in the header's table
  std::string who_;
  double timeout_s_;
};

}  // namespace rlforge
