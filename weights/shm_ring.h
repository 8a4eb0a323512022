// The same-host path of the weight plane: a POSIX shared-memory segment with two bucket slots.
//
// ShmRingSink (trainer rank 0): BeginPublication(p, readers, their pids) -> per bucket, slot
//   (bucket % 2): wait until its last bucket was taken by every reader -> fill in place ->
//   header {tag (p, bucket), version, nbytes, checksum, readers}
// ShmRingSource (engine r of the publication's readers): set_publication(p, r) -> wait until
//   its slot's tag names (p, bucket) -> read in place (no copy) -> Release: bit r of the slot's
//   taken set (the last one frees the slot for bucket + 2)
//
// Tags name (publication, bucket), not (version, bucket): every stream has its own publication
// number (the controller's, PublishWeights.publication), greater than every earlier one, so the
// same version may go through the ring again (to a replacement engine, with the other engines
// not reading it) and a reader never takes a bucket of an earlier stream for the one it waits
// for; an older tag in its slot means "not yet", a newer one "you were not counted". The ring
// keeps nothing of a version once its stream drained (two buckets, not a model): a new engine
// gets the current version by a stream of its own.
// A reader whose process is gone (an engine lost mid-stream, killed by the controller) takes
// nothing more, and the sink stops waiting for it (it checks the readers' pids every 5 ms): the
// stream goes on for the others, and the lost engine's replacement loads the version in a
// stream of its own. The segment is bucket_bytes x 2 plus a page, whatever the model's size.
// Every wait has a deadline; a reader also watches the publisher's pid, so a publisher that
// dies mid-transfer is reported at once (naming the bucket), not at the deadline. The sink owns and
// unlinks the segment. Same host only (a pid and a segment name mean nothing elsewhere).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "weights/bucket_stream.h"

namespace rlforge {

class ShmRingSink final : public BucketSink {
 public:
  // Creates "/<name>" with two slots of bucket_bytes.
  static absl::StatusOr<std::unique_ptr<ShmRingSink>> Create(const std::string& name,
                                                             uint64_t bucket_bytes,
                                                             double timeout_s);
  ~ShmRingSink() override;
  static constexpr int kMaxReaders = 64;
  // The next stream (BucketWriter's buckets from Acquire of bucket 0 to Drain) is publication
  // `publication`, read by `readers` engines (readers 0..readers-1; each takes every bucket)
  // whose processes are `reader_pids` (in reader order, on this host; empty or 0: not known,
  // so never taken for gone). An error, naming both numbers, when `publication` is not above
  // every earlier one.
  absl::Status BeginPublication(int64_t publication, int readers,
                                std::vector<int> reader_pids = {});
  std::string location() const { return "shm-ring:" + name_; }

  absl::StatusOr<char*> Acquire(int64_t version, int64_t bucket) override;
  absl::Status Commit(int64_t version, int64_t bucket, uint64_t nbytes, uint64_t checksum) override;
  absl::Status Drain() override;

 private:
  ShmRingSink(std::string name, void* base, size_t mapped, double timeout_s)
      : name_(std::move(name)), base_(base), mapped_(mapped), timeout_s_(timeout_s) {}
  absl::Status AwaitFree(int slot, const char* what);
  // The readers of this publication whose process is gone, as bits.
  // Readers (of `pids`) whose process is gone.
  static uint64_t GoneReaders(const std::vector<int>& pids);

  std::string name_;
  void* base_;
  size_t mapped_;
  double timeout_s_;
  int readers_ = 1;
  std::vector<int> reader_pids_;
  // The publication before publication_ and its readers: a reader that died mid-stream leaves
  // that stream's last buckets untaken, and the next stream's first two wait on them.
  std::vector<int> previous_reader_pids_;
  int64_t previous_publication_ = 0;
  int64_t publication_ = 0;  // the last one begun (0: none)
  bool streamed_ = true;     // publication_'s stream began (its bucket 0 was acquired)
};

class ShmRingSource final : public BucketSource {
 public:
  // Maps `location` ("shm-ring:/name", from ShmRingSink::location).
  static absl::StatusOr<std::unique_ptr<ShmRingSource>> Open(const std::string& location,
                                                             double timeout_s);
  ~ShmRingSource() override;

  // The stream the next version's buckets come in (LoadWeights.publication; above 0), and this
  // engine's place among its readers (LoadWeights.reader).
  void set_publication(int64_t publication, int reader = 0) {
    publication_ = publication;
    reader_ = reader;
  }
  // Waits for (publication, bucket); fails when the slot holds a later publication (this
  // engine was not among its readers) or the publication carries another version.
  absl::StatusOr<Bucket> Next(int64_t version, int64_t bucket) override;
  absl::Status Release(int64_t version, int64_t bucket) override;

 private:
  ShmRingSource(std::string name, void* base, size_t mapped, double timeout_s)
      : name_(std::move(name)), base_(base), mapped_(mapped), timeout_s_(timeout_s) {}

  std::string name_;
  void* base_;
  size_t mapped_;
  double timeout_s_;
  int64_t publication_ = 0;
  int reader_ = 0;
};

}  // namespace rlforge
