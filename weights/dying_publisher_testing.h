// Tests only: a mapped-segment publisher in a child process that dies mid-transfer, for the
// weights and rollout tests of what an engine does when its publisher is killed.
//
// DyingMappedPublisher(name, m, write_v1) -> child: MappedSink "/name", version 1 written whole
//   by write_v1 -> started() -> CutVersion2(): bucket 0 of version 2 committed (zeros), then
//   the child is killed (SIGKILL) before bucket 1.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <string>

#include "weights/shm_mapped.h"

namespace rlforge {

class DyingMappedPublisher {
 public:
  DyingMappedPublisher(const std::string& name, const proto::WeightManifest& m,
                       const std::function<absl::Status(MappedSink&)>& write_v1) {
    if (pipe(up_) != 0 || pipe(down_) != 0) return;
    child_ = fork();
    if (child_ == 0) RunChild(name, m, write_v1);
    char c;
    started_ = child_ > 0 && read(up_[0], &c, 1) == 1;
  }
  DyingMappedPublisher(const DyingMappedPublisher&) = delete;
  ~DyingMappedPublisher() {
    Kill();
    for (int fd : {up_[0], up_[1], down_[0], down_[1]}) {
      if (fd >= 0) close(fd);
    }
  }

  // Version 1 is whole in the segment.
  bool started() const { return started_; }

  // Bucket 0 of version 2 is committed, and the publisher is gone. False when a step failed.
  bool CutVersion2() {
    char c;
    const bool cut = write(down_[1], "b", 1) == 1 && read(up_[0], &c, 1) == 1;
    Kill();
    return cut;
  }

 private:
  [[noreturn]] void RunChild(const std::string& name, const proto::WeightManifest& m,
                             const std::function<absl::Status(MappedSink&)>& write_v1) {
    auto sink = MappedSink::Create(name, m, 20);
    if (!sink.ok() || !write_v1(**sink).ok()) _exit(2);
    (void)!write(up_[1], "a", 1);
    char x;
    if (read(down_[0], &x, 1) != 1) _exit(3);
    auto buf = (*sink)->Acquire(2, 0);
    if (!buf.ok()) _exit(4);
    std::memset(*buf, 0, m.bucket_bytes());
    (*sink)->Commit(2, 0, m.bucket_bytes(), BucketChecksum(*buf, m.bucket_bytes())).IgnoreError();
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

  pid_t child_ = -1;
  int up_[2] = {-1, -1}, down_[2] = {-1, -1};
  bool started_ = false;
};

}  // namespace rlforge
