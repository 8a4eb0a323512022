// Tests only: a weight publisher in a child process that dies mid-transfer, for the weights and
// rollout tests of what an engine does when its publisher is killed (any BucketSink: the shm
// ring, the mapped segment).
//
// DyingPublisher(make_sink, m, write_before, cut) -> child: make_sink(), the versions before
//   `cut` written whole by write_before -> started() -> Cut(): bucket 0 of version `cut`
//   committed (zeros), then the child is killed (SIGKILL) before bucket 1.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <memory>

#include "weights/bucket_stream.h"

namespace rlforge {

class DyingPublisher {
 public:
  using MakeSink = std::function<absl::StatusOr<std::unique_ptr<BucketSink>>()>;
  using WriteBefore = std::function<absl::Status(BucketSink&)>;

  DyingPublisher(const MakeSink& make_sink, const proto::WeightManifest& m,
                 const WriteBefore& write_before, int64_t cut)
      : cut_(cut) {
    if (pipe(up_) != 0 || pipe(down_) != 0) return;
    child_ = fork();
    if (child_ == 0) RunChild(make_sink, m, write_before);
    char c;
    started_ = child_ > 0 && read(up_[0], &c, 1) == 1;
  }
  DyingPublisher(const DyingPublisher&) = delete;
  ~DyingPublisher() {
    Kill();
    for (int fd : {up_[0], up_[1], down_[0], down_[1]}) {
      if (fd >= 0) close(fd);
    }
  }

  // The versions before `cut` are whole in the sink.
  bool started() const { return started_; }

  // Bucket 0 of version `cut` is committed, and the publisher is gone. False when a step failed.
  bool Cut() {
    char c;
    const bool cut = write(down_[1], "b", 1) == 1 && read(up_[0], &c, 1) == 1;
    Kill();
    return cut;
  }

 private:
  [[noreturn]] void RunChild(const MakeSink& make_sink, const proto::WeightManifest& m,
                             const WriteBefore& write_before) {
    auto sink = make_sink();
    if (!sink.ok() || !write_before(**sink).ok()) _exit(2);
    (void)!write(up_[1], "a", 1);
    char x;
    if (read(down_[0], &x, 1) != 1) _exit(3);
    auto buf = (*sink)->Acquire(cut_, 0);
    if (!buf.ok()) _exit(4);
    std::memset(*buf, 0, m.bucket_bytes());
    (*sink)
        ->Commit(cut_, 0, m.bucket_bytes(), BucketChecksum(*buf, m.bucket_bytes()))
        .IgnoreError();
    (void)!write(up_[1], "c", 1);
    pause();
    _exit(0);
  }
  void Kill() {
    if (child_ <= 0) return;
    kill(child_, SIGKILL);
    waitpid(child_, nullptr, 0);
    child_ = -1;
  }

  const int64_t cut_;
  pid_t child_ = -1;
  int up_[2] = {-1, -1}, down_[2] = {-1, -1};
  bool started_ = false;
};

}  // namespace rlforge
