#include "sim_bridge/shm_channel.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <new>
#include <thread>

#include "absl/strings/str_cat.h"

namespace rlforge::sim {

namespace {

constexpr uint64_t kMagic = 0x316d6873'67666c72ull;  // "rlfgshm1"
constexpr uint32_t kVersion = 1;

using Clock = std::chrono::steady_clock;

std::string ErrnoText() { return std::strerror(errno); }

bool Alive(int32_t pid) { return pid > 0 && (kill(pid, 0) == 0 || errno != ESRCH); }

void FutexWake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, 1, nullptr, nullptr, 0);
}

// Sleeps while *word == value, at most `ms`.
void FutexWait(std::atomic<uint32_t>* word, uint32_t value, int ms) {
  timespec ts{ms / 1000, static_cast<long>(ms % 1000) * 1'000'000};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, value, &ts, nullptr, 0);
}

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

struct ShmChannel::Header {
  std::atomic<uint64_t> magic;  // written last by the server: the segment is ready
  uint32_t version;
  uint32_t reserved;
  uint64_t capacity;
  std::atomic<int32_t> server_pid;
  std::atomic<int32_t> client_pid;
  std::atomic<uint32_t> request_seq;  // futex words
  std::atomic<uint32_t> reply_seq;
  // Set while a side sleeps on the word: only then does the other side pay
  // for FUTEX_WAKE. seq_cst on both sides: a sleeper sees the new number or
  // the writer sees the flag.
  std::atomic<uint32_t> request_sleeper;
  std::atomic<uint32_t> reply_sleeper;
};

static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

namespace {

constexpr size_t kHeaderBytes = 64;
static_assert(sizeof(ShmChannel::Header) <= kHeaderBytes);

absl::StatusOr<std::string> PathOf(const std::string& address) {
  if (!IsShmAddress(address)) {
    return absl::InvalidArgumentError(absl::StrCat("'", address, "' is not an shm:// address"));
  }
  std::string name = address.substr(std::strlen(kShmScheme));
  bool ok = !name.empty() && name.size() < 200 && name[0] != '.';
  for (char c : name) {
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '-' || c == '_' || c == '.');
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", address, "': an shm name is 1-199 of [A-Za-z0-9._-], not starting with '.'"));
  }
  return "/dev/shm/" + name;
}

}  // namespace

bool IsShmAddress(const std::string& address) { return address.rfind(kShmScheme, 0) == 0; }

ShmChannel::ShmChannel(std::string address, std::string path, void* base, size_t size, bool server,
                       Options options)
    : address_(std::move(address)),
      path_(std::move(path)),
      base_(base),
      size_(size),
      server_(server),
      options_(options) {}

ShmChannel::~ShmChannel() {
  auto* h = static_cast<Header*>(base_);
  if (server_) {
    h->server_pid.store(0);
    struct stat st {};
    // Only our own file: a successor may have replaced it already.
    if (stat(path_.c_str(), &st) == 0 && st.st_ino == inode_) unlink(path_.c_str());
  } else {
    int32_t me = getpid();
    h->client_pid.compare_exchange_strong(me, 0);
  }
  munmap(base_, size_);
}

uint8_t* ShmChannel::area(bool request) const {
  auto* b = static_cast<uint8_t*>(base_) + kHeaderBytes;
  return request ? b : b + options_.capacity;
}

absl::StatusOr<std::unique_ptr<ShmChannel>> ShmChannel::Create(const std::string& address,
                                                               Options options) {
  auto path = PathOf(address);
  if (!path.ok()) return path.status();
  size_t size = kHeaderBytes + 2 * options.capacity;
  unlink(path->c_str());  // a segment left by a server that was killed
  int fd = open(path->c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    return absl::UnavailableError(absl::StrCat("cannot create ", *path, ": ", ErrnoText()));
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    std::string e = ErrnoText();
    close(fd);
    unlink(path->c_str());
    return absl::ResourceExhaustedError(absl::StrCat("cannot size ", *path, " to ", size, ": ", e));
  }
  struct stat st {};
  fstat(fd, &st);
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    unlink(path->c_str());
    return absl::ResourceExhaustedError(absl::StrCat("cannot map ", *path, ": ", ErrnoText()));
  }
  auto* h = new (base) Header{};
  h->version = kVersion;
  h->capacity = options.capacity;
  h->server_pid.store(getpid());
  h->client_pid.store(0);
  h->request_seq.store(0);
  h->reply_seq.store(0);
  h->request_sleeper.store(0);
  h->reply_sleeper.store(0);
  h->magic.store(kMagic, std::memory_order_release);
  std::unique_ptr<ShmChannel> ch(
      new ShmChannel(address, *path, base, size, /*server=*/true, options));
  ch->inode_ = st.st_ino;
  return ch;
}

absl::StatusOr<std::unique_ptr<ShmChannel>> ShmChannel::Open(const std::string& address,
                                                             int timeout_ms, Options options) {
  auto path = PathOf(address);
  if (!path.ok()) return path.status();
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  std::string why = "it does not exist";
  while (true) {
    int fd = open(path->c_str(), O_RDWR | O_CLOEXEC);
    struct stat st {};
    if (fd >= 0 && fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) > kHeaderBytes) {
      size_t size = static_cast<size_t>(st.st_size);
      void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      close(fd);
      if (base == MAP_FAILED) {
        return absl::UnavailableError(absl::StrCat("cannot map ", *path, ": ", ErrnoText()));
      }
      auto* h = static_cast<Header*>(base);
      int32_t server_pid = h->server_pid.load();
      if (h->magic.load(std::memory_order_acquire) == kMagic && !Alive(server_pid)) {
        // Left by a server that was killed; its successor will replace it.
        why = absl::StrCat("it was left by a server (pid ", server_pid, ") that has exited");
      } else if (h->magic.load(std::memory_order_acquire) == kMagic) {
        if (h->version != kVersion || kHeaderBytes + 2 * h->capacity != size) {
          munmap(base, size);
          return absl::FailedPreconditionError(
              absl::StrCat(*path, ": shm channel version ", h->version, " of ", size,
                           " bytes, this side speaks version ", kVersion));
        }
        int32_t me = getpid(), other = 0;
        while (!h->client_pid.compare_exchange_strong(other, me)) {
          if (other == me) break;
          if (Alive(other)) {
            munmap(base, size);
            return absl::FailedPreconditionError(absl::StrCat(
                address, " already has a client (pid ", other, "); an shm server serves one"));
          }
          // `other` died: its claim is ours to take.
        }
        options.capacity = h->capacity;
        std::unique_ptr<ShmChannel> ch(
            new ShmChannel(address, *path, base, size, /*server=*/false, options));
        // A dead client's last request may still be in the server's hands.
        while (h->reply_seq.load(std::memory_order_acquire) !=
               h->request_seq.load(std::memory_order_acquire)) {
          if (Clock::now() > deadline) {
            return absl::DeadlineExceededError(
                absl::StrCat(address, ": the server did not finish its previous client's request"));
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        return ch;
      } else {
        why = "the server has not finished creating it";
      }
      munmap(base, size);
    } else if (fd >= 0) {
      close(fd);
      why = "it is still empty";
    }
    if (Clock::now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "no sim server at ", address, " after ", timeout_ms / 1000.0, " s: ", *path, ": ", why));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

absl::Status ShmChannel::Send(const std::vector<zmq::message_t>& frames) {
  auto* h = static_cast<Header*>(base_);
  size_t need = 4;
  for (const auto& f : frames) need += 8 + f.size();
  if (need > options_.capacity) {
    return absl::ResourceExhaustedError(absl::StrCat("a message of ", need, " bytes exceeds ",
                                                     address_, "'s capacity of ", options_.capacity,
                                                     " bytes"));
  }
  uint8_t* p = area(!server_);
  uint32_t count = static_cast<uint32_t>(frames.size());
  std::memcpy(p, &count, 4);
  p += 4;
  for (const auto& f : frames) {
    uint64_t n = f.size();
    std::memcpy(p, &n, 8);
    std::memcpy(p + 8, f.data(), n);
    p += 8 + n;
  }
  if (server_) {
    h->reply_seq.store(seen_);
    if (h->reply_sleeper.load()) FutexWake(&h->reply_seq);
  } else {
    h->request_seq.store(h->request_seq.load(std::memory_order_relaxed) + 1);
    if (h->request_sleeper.load()) FutexWake(&h->request_seq);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<zmq::message_t>> ShmChannel::Receive(int timeout_ms) {
  auto* h = static_cast<Header*>(base_);
  std::atomic<uint32_t>* word = server_ ? &h->request_seq : &h->reply_seq;
  std::atomic<uint32_t>* sleeper = server_ ? &h->request_sleeper : &h->reply_sleeper;
  // Client: the reply's number reaches the request's. Server: a new request.
  const uint32_t want = h->request_seq.load(std::memory_order_relaxed);
  auto ready = [&](uint32_t v) { return server_ ? v != seen_ : v == want; };
  auto start = Clock::now();
  auto spin_end = start + std::chrono::microseconds(options_.spin_us);
  auto deadline = start + std::chrono::milliseconds(timeout_ms);
  uint32_t v = word->load(std::memory_order_acquire);
  for (int i = 0; !ready(v); ++i) {
    if ((i & 15) == 15) {
      auto now = Clock::now();
      if (now >= spin_end) break;
      sched_yield();  // on a crowded machine, let the peer run
    }
    CpuRelax();
    v = word->load(std::memory_order_acquire);
  }
  while (!ready(v)) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      return absl::DeadlineExceededError(
          absl::StrCat(address_, ": nothing within ", timeout_ms / 1000.0, " s"));
    }
    sleeper->store(1);
    if (word->load() == v)
      FutexWait(word, v, static_cast<int>(std::min<int64_t>(left.count(), 100)));
    sleeper->store(0);
    uint32_t now = word->load(std::memory_order_acquire);
    if (now == v && !server_ && !Alive(h->server_pid.load())) {
      return absl::UnavailableError(absl::StrCat("the sim server at ", address_, " has exited"));
    }
    v = now;
  }
  if (server_) seen_ = v;
  // Read the area; a peer that wrote garbage gets DataLoss, never an overrun.
  const uint8_t* p = area(server_);
  const uint8_t* end = p + options_.capacity;
  uint32_t count = 0;
  std::memcpy(&count, p, 4);
  p += 4;
  if (count > options_.capacity / 8) {
    return absl::DataLossError(absl::StrCat(address_, ": a message claims ", count, " frames"));
  }
  std::vector<zmq::message_t> frames;
  frames.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    uint64_t n = 0;
    if (end - p < 8) return absl::DataLossError(absl::StrCat(address_, ": truncated message"));
    std::memcpy(&n, p, 8);
    p += 8;
    if (n > static_cast<uint64_t>(end - p)) {
      return absl::DataLossError(
          absl::StrCat(address_, ": frame ", i, " claims ", n, " bytes, past the area's end"));
    }
    frames.emplace_back(p, n);
    p += n;
  }
  return frames;
}

}  // namespace rlforge::sim
