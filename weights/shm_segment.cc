#include "weights/shm_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"

namespace rlforge {

absl::StatusOr<MappedSegment> CreateSegment(const std::string& shm_name, size_t size) {
  const int fd = shm_open(shm_name.c_str(), O_CREAT | O_RDWR | O_TRUNC, 0600);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("shm_open ", shm_name, ": ", std::strerror(errno)));
  }
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    const int err = errno;
    close(fd);
    shm_unlink(shm_name.c_str());
    return absl::ResourceExhaustedError(absl::StrCat("cannot size shared memory ", shm_name, " to ",
                                                     size, " bytes: ", std::strerror(err)));
  }
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    shm_unlink(shm_name.c_str());
    return absl::UnavailableError(absl::StrCat("mmap ", shm_name, ": ", std::strerror(errno)));
  }
  return MappedSegment{base, size};
}

absl::StatusOr<MappedSegment> OpenSegment(const std::string& shm_name, bool writable,
                                          const std::string& hint) {
  const int fd = shm_open(shm_name.c_str(), writable ? O_RDWR : O_RDONLY, 0);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("cannot open shared memory ", shm_name, ": ",
                                               std::strerror(errno), " (", hint, ")"));
  }
  struct stat st;
  fstat(fd, &st);
  const size_t size = static_cast<size_t>(st.st_size);
  void* base = size == 0 ? MAP_FAILED
                         : mmap(nullptr, size, writable ? PROT_READ | PROT_WRITE : PROT_READ,
                                MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    return absl::UnavailableError(absl::StrCat("mmap ", shm_name, ": ", std::strerror(errno)));
  }
  return MappedSegment{base, size};
}

namespace {

constexpr char kPublisherPrefix[] = "rlforge-w-";

// Unlinks /dev/shm/rlforge-w-<pid>-* of every pid that no longer exists.
void RemoveOrphanedPublisherSegments() {
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return;
  while (const dirent* e = readdir(dir)) {
    const std::string name = e->d_name;
    if (!absl::StartsWith(name, kPublisherPrefix)) continue;
    const size_t from = sizeof(kPublisherPrefix) - 1;
    const size_t dash = name.find('-', from);
    int pid = 0;
    if (dash == std::string::npos || !absl::SimpleAtoi(name.substr(from, dash - from), &pid) ||
        pid <= 0) {
      continue;
    }
    if (kill(pid, 0) != 0 && errno == ESRCH) shm_unlink(("/" + name).c_str());
  }
  closedir(dir);
}

}  // namespace

std::string PublisherSegmentName(const std::string& actor_id) {
  RemoveOrphanedPublisherSegments();
  return absl::StrCat("/", kPublisherPrefix, getpid(), "-", actor_id);
}

absl::Status AwaitCondition(const std::function<bool()>& done,
                            const std::function<std::string()>& failed, double timeout_s,
                            const std::string& what) {
  const Stopwatch timer;
  int64_t sleep_us = 0;
  double next_check = 0;
  while (!done()) {
    const double t = timer.Seconds();
    if (t >= next_check) {
      if (std::string why = failed(); !why.empty()) return absl::AbortedError(why);
      next_check = t + 0.005;
    }
    if (t > timeout_s) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, " within ", timeout_s, " s (weights.timeout_s)"));
    }
    if (sleep_us == 0) {
      std::this_thread::yield();
      sleep_us = 1;
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
      sleep_us = std::min<int64_t>(sleep_us * 2, 200);
    }
  }
  return absl::OkStatus();
}

}  // namespace rlforge
