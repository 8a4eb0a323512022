// The same-host path of the weight plane: a POSIX shared-memory segment with two bucket slots.
//
// ShmRingSink (trainer rank 0) -> slot (bucket % 2): wait until its last bucket was taken by
//   every reader -> fill in place -> header {tag (version, bucket), nbytes, checksum, readers}
// ShmRingSource (each engine) -> wait until its slot's tag names (version, bucket) -> read in
//   place (no copy) -> Release: acks++ (the last ack frees the slot for bucket + 2)
//
// Tags name (version, bucket): a version goes through the ring once, versions in increasing
// order (a reader could otherwise take a stale copy for a republished one).
// The segment is bucket_bytes x 2 plus a page, whatever the model's size. Every wait has a
// deadline; a reader also watches the publisher's pid, so a publisher that dies mid-transfer
// is reported at once (naming the bucket), not at the deadline. The sink owns and unlinks the
// segment. Same host only (a pid and a segment name mean nothing elsewhere).
#pragma once

#include <memory>
#include <string>

#include "weights/bucket_stream.h"

namespace rlforge {

class ShmRingSink final : public BucketSink {
 public:
  // Creates "/<name>" with two slots of bucket_bytes.
  static absl::StatusOr<std::unique_ptr<ShmRingSink>> Create(const std::string& name,
                                                             uint64_t bucket_bytes,
                                                             double timeout_s);
  ~ShmRingSink() override;
  // The next version is read by `readers` engines (each takes every bucket).
  void set_readers(int readers) { readers_ = readers; }
  std::string location() const { return "shm-ring:" + name_; }

  absl::StatusOr<char*> Acquire(int64_t version, int64_t bucket) override;
  absl::Status Commit(int64_t version, int64_t bucket, uint64_t nbytes, uint64_t checksum) override;
  absl::Status Drain() override;

 private:
  ShmRingSink(std::string name, void* base, size_t mapped, double timeout_s)
      : name_(std::move(name)), base_(base), mapped_(mapped), timeout_s_(timeout_s) {}
  absl::Status AwaitFree(int slot, const char* what);

  std::string name_;
  void* base_;
  size_t mapped_;
  double timeout_s_;
  int readers_ = 1;
  int64_t last_version_ = -1;
};

class ShmRingSource final : public BucketSource {
 public:
  // Maps `location` ("shm-ring:/name", from ShmRingSink::location).
  static absl::StatusOr<std::unique_ptr<ShmRingSource>> Open(const std::string& location,
                                                             double timeout_s);
  ~ShmRingSource() override;

  absl::StatusOr<Bucket> Next(int64_t version, int64_t bucket) override;
  absl::Status Release(int64_t version, int64_t bucket) override;

 private:
  ShmRingSource(std::string name, void* base, size_t mapped, double timeout_s)
      : name_(std::move(name)), base_(base), mapped_(mapped), timeout_s_(timeout_s) {}

  std::string name_;
  void* base_;
  size_t mapped_;
  double timeout_s_;
};

}  // namespace rlforge
