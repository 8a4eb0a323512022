#include "reward/sandbox.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace rlforge::reward {

namespace {

// Steps of the child's set-up, reported with errno when one fails.
enum Step : int {
  kUnshare = 1, kForkInit, kMountPrivate, kMountTmpfs, kBindWork, kMountProc, kChdir,
  kRlimit, kIds, kExec,
};
const char* StepName(int step) {
  switch (step) {
    case kUnshare: return "unshare(net, pid, mount, ipc, uts namespaces)";
    case kForkInit: return "fork of the namespace's init";
    case kMountPrivate: return "making the mount namespace private";
    case kMountTmpfs: return "mounting a private tmpfs";
    case kBindWork: return "binding the working folder at /tmp/work";
    case kMountProc: return "mounting /proc for the PID namespace";
    case kChdir: return "chdir /tmp/work";
    case kRlimit: return "setrlimit";
    case kIds: return "dropping to the run's uid";
    case kExec: return "exec";
  }
  return "?";
}

// What the child processes tell the caller on the report pipe.
struct Report {
  enum Kind : int { kFailed, kInitPid, kStatus } kind;
  int a;  // kFailed: step; kInitPid: pid; kStatus: wait status
  int b;  // kFailed: errno
};

constexpr const char* kMasked[] = {"/tmp", "/var/tmp", "/dev/shm", "/run/lock"};
constexpr const char kWorkRoot[] = "/run/rlforge-sandbox";
constexpr uid_t kUidBase = 200000;
constexpr unsigned kUidSlots = 50000;
std::atomic<unsigned> uid_counter{0};

// Everything the children use, made before fork(): after it they call only syscalls.
struct Prepared {
  std::vector<std::string> argv_s, env_s;
  std::vector<char*> argv, env;
  std::string bind_source, tmpfs_opts;
  int out_fd, err_fd, report_fd;
  uid_t uid;
  rlimit cpu, as, nproc, fsize, nofile, core;
};

void Send(int fd, Report r) {
  while (write(fd, &r, sizeof r) < 0 && errno == EINTR) {
  }
}

[[noreturn]] void Fail(const Prepared& p, int step) {
  Send(p.report_fd, {Report::kFailed, step, errno});
  _exit(127);
}

void MountPrivateFolders(const Prepared& p) {
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) Fail(p, kMountPrivate);
  for (const char* dir : kMasked) {
    if (mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV, p.tmpfs_opts.c_str()) != 0 &&
        errno != ENOENT) {
      Fail(p, kMountTmpfs);
    }
  }
  if (mkdir("/tmp/work", 0755) != 0 ||
      mount(p.bind_source.c_str(), "/tmp/work", nullptr, MS_BIND, nullptr) != 0) {
    Fail(p, kBindWork);
  }
  if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) {
    Fail(p, kMountProc);
  }
  if (chdir("/tmp/work") != 0) Fail(p, kChdir);
}

// The namespace's init: private folders, limits, the run's uid, then the program.
[[noreturn]] void Init(const Prepared& p) {
  MountPrivateFolders(p);
  if (setrlimit(RLIMIT_CPU, &p.cpu) || setrlimit(RLIMIT_AS, &p.as) ||
      setrlimit(RLIMIT_NPROC, &p.nproc) || setrlimit(RLIMIT_FSIZE, &p.fsize) ||
      setrlimit(RLIMIT_NOFILE, &p.nofile) || setrlimit(RLIMIT_CORE, &p.core)) {
    Fail(p, kRlimit);
  }
  const int null = open("/dev/null", O_RDONLY);
  if (null < 0 || dup2(null, 0) < 0 || dup2(p.out_fd, 1) < 0 || dup2(p.err_fd, 2) < 0) {
    Fail(p, kExec);
  }
  if (setgroups(0, nullptr) || setresgid(p.uid, p.uid, p.uid) || setresuid(p.uid, p.uid, p.uid) ||
      prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) {
    Fail(p, kIds);
  }
  execve(p.argv[0], p.argv.data(), p.env.data());
  Fail(p, kExec);
}

// The first child: new namespaces, then init (pid 1 there); it reports init's pid and status.
[[noreturn]] void Outer(const Prepared& p) {
  setpgid(0, 0);
  if (unshare(CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS) != 0) {
    Fail(p, kUnshare);
  }
  const pid_t init = fork();
  if (init < 0) Fail(p, kForkInit);
  if (init == 0) Init(p);
  Send(p.report_fd, {Report::kInitPid, init, 0});
  int status = 0;
  while (waitpid(init, &status, 0) < 0 && errno == EINTR) {
  }
  Send(p.report_fd, {Report::kStatus, status, 0});
  _exit(0);
}

rlimit Limit(rlim_t soft, rlim_t hard) { return rlimit{soft, hard}; }

Prepared Prepare(const std::vector<std::string>& argv, const std::string& bind_source,
                 const SandboxLimits& l, uid_t uid) {
  Prepared p;
  p.argv_s = argv;
  p.env_s = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp/work", "LANG=C.UTF-8",
             "PYTHONDONTWRITEBYTECODE=1"};
  for (auto& s : p.argv_s) p.argv.push_back(s.data());
  p.argv.push_back(nullptr);
  for (auto& s : p.env_s) p.env.push_back(s.data());
  p.env.push_back(nullptr);
  p.bind_source = bind_source;
  p.tmpfs_opts = absl::StrCat("size=", l.tmpfs_bytes, ",mode=1777");
  p.uid = uid;
  p.cpu = Limit(l.cpu_s, l.cpu_s + 1);
  p.as = Limit(l.memory_bytes, l.memory_bytes);
  p.nproc = Limit(l.processes, l.processes);
  p.fsize = Limit(l.file_bytes, l.file_bytes);
  p.nofile = Limit(64, 64);
  p.core = Limit(0, 0);
  return p;
}

absl::Status WriteFiles(const std::string& dir,
                        const std::vector<std::pair<std::string, std::string>>& files, uid_t uid) {
  for (const auto& [name, content] : files) {
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
      return absl::InvalidArgumentError(absl::StrCat("sandbox: file name '", name,
                                                     "' is not a plain file name"));
    }
    const std::string path = dir + "/" + name;
    std::ofstream f(path, std::ios::binary);
    f << content;
    if (!f.good()) return absl::InternalError(absl::StrCat("sandbox: cannot write ", path));
    f.close();
    if (chown(path.c_str(), uid, uid) != 0) {
      return absl::InternalError(absl::StrCat("sandbox: chown ", path, ": ", strerror(errno)));
    }
  }
  if (chown(dir.c_str(), uid, uid) != 0 || chmod(dir.c_str(), 0700) != 0) {
    return absl::InternalError(absl::StrCat("sandbox: chown ", dir, ": ", strerror(errno)));
  }
  return absl::OkStatus();
}

// Reads the three pipes until all are closed or `deadline` passes; returns false on the deadline.
bool Drain(int out, int err, int report, std::chrono::steady_clock::time_point deadline,
           int64_t cap, SandboxRun& run, std::vector<Report>& reports) {
  pollfd fds[3] = {{out, POLLIN, 0}, {err, POLLIN, 0}, {report, POLLIN, 0}};
  std::string* sinks[2] = {&run.out, &run.err};
  int open_fds = 3;
  while (open_fds > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    const int n = poll(fds, 3, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    for (int i = 0; i < 3; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[4096];
      const ssize_t got = read(fds[i].fd, buf, i == 2 ? sizeof(Report) : sizeof buf);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        fds[i].fd = -1;
        --open_fds;
      } else if (i == 2) {
        if (got == sizeof(Report)) reports.push_back(*reinterpret_cast<Report*>(buf));
      } else if (static_cast<int64_t>(sinks[i]->size()) < cap) {
        sinks[i]->append(buf, std::min<size_t>(got, cap - sinks[i]->size()));
      }
    }
  }
  return true;
}

struct Pipes {
  int fd[3][2] = {{-1, -1}, {-1, -1}, {-1, -1}};  // out, err, report
  ~Pipes() {
    for (auto& p : fd) {
      for (int f : p) {
        if (f >= 0) close(f);
      }
    }
  }
  bool Open() {
    for (auto& p : fd) {
      if (pipe2(p, O_CLOEXEC) != 0) return false;
    }
    return true;
  }
  void CloseWriteEnds() {
    for (auto& p : fd) {
      close(p[1]);
      p[1] = -1;
    }
  }
};

// Runs the prepared children and collects what they report.
absl::StatusOr<SandboxRun> Run(Prepared& p, Pipes& pipes, const SandboxLimits& limits) {
  p.out_fd = pipes.fd[0][1];
  p.err_fd = pipes.fd[1][1];
  p.report_fd = pipes.fd[2][1];
  const pid_t outer = fork();
  if (outer < 0) return absl::InternalError(absl::StrCat("sandbox: fork: ", strerror(errno)));
  if (outer == 0) Outer(p);
  pipes.CloseWriteEnds();
  SandboxRun run;
  run.uid = p.uid;
  std::vector<Report> reports;
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                    std::chrono::duration<double>(limits.wall_s));
  if (!Drain(pipes.fd[0][0], pipes.fd[1][0], pipes.fd[2][0], deadline, limits.output_bytes, run,
             reports)) {
    run.timed_out = true;
    // Killing the namespace's init makes the kernel kill every process in it before the init's
    // parent (ours) sees it end and reports; before that pid is known, the process group.
    bool init_known = false;
    for (const Report& r : reports) {
      if (r.kind == Report::kInitPid) init_known = kill(r.a, SIGKILL) == 0 || init_known;
    }
    if (!init_known) kill(-outer, SIGKILL);
    if (!Drain(pipes.fd[0][0], pipes.fd[1][0], pipes.fd[2][0],
               std::chrono::steady_clock::now() + std::chrono::seconds(5), limits.output_bytes,
               run, reports)) {
      kill(-outer, SIGKILL);
    }
  }
  int status = 0;
  while (waitpid(outer, &status, 0) < 0 && errno == EINTR) {
  }
  for (const Report& r : reports) {
    if (r.kind == Report::kFailed) {
      return absl::FailedPreconditionError(
          absl::StrCat("sandbox: ", StepName(r.a), ": ", strerror(r.b),
                       r.a == kExec ? absl::StrCat(" (", p.argv_s[0], ")") : ""));
    }
    if (r.kind == Report::kStatus) {
      if (WIFEXITED(r.a)) run.exit_code = WEXITSTATUS(r.a);
      if (WIFSIGNALED(r.a)) run.signal = WTERMSIG(r.a);
    }
  }
  if (run.timed_out && run.signal == 0) run.signal = SIGKILL;
  return run;
}

}  // namespace

std::string SandboxRun::Describe() const {
  if (timed_out) return "killed at its wall-time limit";
  if (signal != 0) {
    const char* name = sigabbrev_np(signal);
    return name ? absl::StrCat("killed by SIG", name) : absl::StrCat("killed by signal ", signal);
  }
  return absl::StrCat("exit ", exit_code);
}

absl::StatusOr<SandboxRun> RunInSandbox(const std::vector<std::string>& argv,
                                        const std::vector<std::pair<std::string, std::string>>& files,
                                        const SandboxLimits& limits) {
  if (argv.empty() || argv[0].empty() || argv[0][0] != '/') {
    return absl::InvalidArgumentError("sandbox: argv[0] must be an absolute path");
  }
  // Outside the folders the sandbox masks, so its init can bind it at /tmp/work; 0711: each
  // run's folder (0700, its own uid) is reachable only by that run.
  if (mkdir(kWorkRoot, 0711) != 0 && errno != EEXIST) {
    return absl::InternalError(absl::StrCat("sandbox: mkdir ", kWorkRoot, ": ", strerror(errno)));
  }
  std::string tmpl = absl::StrCat(kWorkRoot, "/run_XXXXXX");
  if (mkdtemp(tmpl.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("sandbox: mkdtemp ", tmpl, ": ", strerror(errno)));
  }
  const std::string dir = tmpl;
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } cleanup{dir};
  const uid_t uid = kUidBase + (static_cast<unsigned>(getpid()) * 7919u + uid_counter++) % kUidSlots;
  if (absl::Status s = WriteFiles(dir, files, uid); !s.ok()) return s;
  Prepared p = Prepare(argv, dir, limits, uid);
  Pipes pipes;
  if (!pipes.Open()) return absl::InternalError(absl::StrCat("sandbox: pipe: ", strerror(errno)));
  return Run(p, pipes, limits);
}

}  // namespace rlforge::reward
