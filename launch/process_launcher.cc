#include "launch/process_launcher.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/cpu_affinity.h"

extern char** environ;

namespace rlforge {

std::string ProcessExit::Describe() const {
  if (signaled) {
    const char* what = strsignal(code);
    return absl::StrCat("killed by signal ", code, " (", what ? what : "?", ")");
  }
  return absl::StrCat("exited with code ", code);
}

LocalProcessLauncher::~LocalProcessLauncher() {
  for (const auto& [pid, name] : running_) kill(-pid, SIGKILL);
  for (const auto& [pid, name] : running_) waitpid(pid, nullptr, 0);
}

namespace {

// What the child needs, prepared before fork: after fork only async-signal-safe calls are
// allowed (the controller has other threads). Pointers into its own strings: not copyable.
struct ChildImage {
  ChildImage() = default;
  ChildImage(const ChildImage&) = delete;
  ChildImage& operator=(const ChildImage&) = delete;

  std::vector<char*> argv, envp;
  std::vector<std::string> env_strings;
  cpu_set_t cpus;
  bool pin = false;
};

// The spec's argv, this process's environment with the spec's variables set over it, and the
// cpus to pin to.
absl::Status Prepare(const ProcessSpec& spec, ChildImage* image) {
  for (const auto& a : spec.argv) image->argv.push_back(const_cast<char*>(a.c_str()));
  image->argv.push_back(nullptr);
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    std::string key = kv.substr(0, kv.find('='));
    if (!spec.env.count(key)) image->env_strings.push_back(kv);
  }
  for (const auto& [k, v] : spec.env) image->env_strings.push_back(k + "=" + v);
  for (auto& s : image->env_strings) image->envp.push_back(s.data());
  image->envp.push_back(nullptr);
  CPU_ZERO(&image->cpus);
  for (int c : spec.cpus) {
    if (c < 0 || c >= CPU_SETSIZE) {
      return absl::InvalidArgumentError(
          absl::StrCat("cpu ", c, " for ", spec.name, " is out of range"));
    }
    CPU_SET(c, &image->cpus);
  }
  image->pin = !spec.cpus.empty();
  return absl::OkStatus();
}

// In the child: its own process group, output to the log, pinned, exec. A failure's errno goes
// up `report_fd` (negative: the pinning failed, not the exec).
[[noreturn]] void ExecChild(const ChildImage& image, pid_t parent, int log_fd, int report_fd) {
  setpgid(0, 0);  // own group: a terminal's Ctrl-C reaches the controller, which stops us
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the controller
  if (getppid() != parent) _exit(1);
  dup2(log_fd, STDOUT_FILENO);
  dup2(log_fd, STDERR_FILENO);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  int err = 0;
  if (image.pin && sched_setaffinity(0, sizeof image.cpus, &image.cpus) != 0) {
    err = -errno;
  } else {
    execve(image.argv[0], image.argv.data(), image.envp.data());
    err = errno;
  }
  ssize_t ignored = write(report_fd, &err, sizeof err);
  (void)ignored;
  _exit(127);
}

// Waits for the child's exec: EOF on `report_fd` means it worked; an errno means it did not
// (the child is reaped and the error names the spec).
absl::Status AwaitExec(const ProcessSpec& spec, pid_t pid, int report_fd) {
  int child_errno = 0;
  ssize_t n;
  do {
    n = read(report_fd, &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  close(report_fd);
  if (n != sizeof child_errno) return absl::OkStatus();
  waitpid(pid, nullptr, 0);
  if (child_errno < 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot start ", spec.name, ": pinning to cpus ",
                                                   FormatCpuList(spec.cpus), ": ",
                                                   std::strerror(-child_errno)));
  }
  return absl::InvalidArgumentError(absl::StrCat("cannot start ", spec.name, ": exec ",
                                                 spec.argv[0], ": ", std::strerror(child_errno)));
}

}  // namespace

absl::StatusOr<int> LocalProcessLauncher::Start(const ProcessSpec& spec) {
  if (spec.argv.empty()) return absl::InvalidArgumentError("empty argv for " + spec.name);
  if (!spec.host.empty() || spec.gpus > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot start ", spec.name, " on host '", spec.host, "' with ", spec.gpus,
        " GPU(s): the local launcher starts processes on this host and binds no GPUs"));
  }
  ChildImage image;
  if (absl::Status s = Prepare(spec, &image); !s.ok()) return s;
  int log_fd = open(spec.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot open log ", spec.log_path, ": ", std::strerror(errno)));
  }
  // The child reports an exec failure's errno through this pipe; EOF means exec worked.
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) {
    close(log_fd);
    return absl::UnavailableError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    int err = errno;
    close(log_fd);
    close(pipefd[0]);
    close(pipefd[1]);
    return absl::UnavailableError(absl::StrCat("fork for ", spec.name, ": ", std::strerror(err)));
  }
  if (pid == 0) ExecChild(image, parent, log_fd, pipefd[1]);
  close(log_fd);
  close(pipefd[1]);
  if (absl::Status s = AwaitExec(spec, pid, pipefd[0]); !s.ok()) return s;
  setpgid(pid, pid);  // also from the parent, so the group exists before any Signal()
  running_[pid] = spec.name;
  return pid;
}

std::vector<ProcessExit> LocalProcessLauncher::Reap() {
  std::vector<ProcessExit> out;
  for (auto it = running_.begin(); it != running_.end();) {
    int status = 0;
    pid_t r = waitpid(it->first, &status, WNOHANG);
    if (r == it->first) {
      ProcessExit e;
      e.pid = r;
      e.name = it->second;
      e.signaled = WIFSIGNALED(status);
      e.code = e.signaled ? WTERMSIG(status) : WEXITSTATUS(status);
      out.push_back(e);
      // The group may hold grandchildren (a sim server's Python process): end them too.
      kill(-r, SIGKILL);
      it = running_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

void LocalProcessLauncher::Signal(int pid, int signal) {
  if (running_.count(pid)) kill(-pid, signal);
}

std::vector<int> LocalProcessLauncher::Running() const {
  std::vector<int> pids;
  for (const auto& [pid, name] : running_) pids.push_back(pid);
  return pids;
}

std::string SelfExecutable() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  return std::string(buf, static_cast<size_t>(n));
}

namespace {

std::string Sibling(const std::string& exe, const std::string& name) {
  size_t slash = exe.rfind('/');
  return (slash == std::string::npos ? std::string() : exe.substr(0, slash + 1)) + name;
}

}  // namespace

std::string ActorExecutable(const std::string& rlforge_exe) {
  return Sibling(rlforge_exe, "rlforge-actor");
}

std::string StoreExecutable(const std::string& rlforge_exe) {
  return Sibling(rlforge_exe, "rlforge-store");
}

std::string LmToolExecutable(const std::string& rlforge_exe) {
  return Sibling(rlforge_exe, "rlforge-lm");
}

std::string TailOfFile(const std::string& path, int lines) {
  std::ifstream in(path);
  if (!in) return "";
  std::deque<std::string> last;
  std::string line;
  while (std::getline(in, line)) {
    last.push_back(line);
    if (static_cast<int>(last.size()) > lines) last.pop_front();
  }
  std::string out;
  for (const auto& l : last) absl::StrAppend(&out, "    | ", l, "\n");
  return out;
}

}  // namespace rlforge
