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

absl::StatusOr<int> LocalProcessLauncher::Start(const ProcessSpec& spec) {
  if (spec.argv.empty()) return absl::InvalidArgumentError("empty argv for " + spec.name);
  if (!spec.host.empty() || spec.gpus > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot start ", spec.name, " on host '", spec.host, "' with ", spec.gpus,
        " GPU(s): the local launcher starts processes on this host and binds no GPUs"));
  }
  // Everything the child needs is prepared before fork: after fork only
  // async-signal-safe calls are allowed (the controller has other threads).
  std::vector<char*> argv;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    std::string key = kv.substr(0, kv.find('='));
    if (!spec.env.count(key)) env_strings.push_back(kv);
  }
  for (const auto& [k, v] : spec.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);

  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  for (int c : spec.cpus) {
    if (c < 0 || c >= CPU_SETSIZE) {
      return absl::InvalidArgumentError(
          absl::StrCat("cpu ", c, " for ", spec.name, " is out of range"));
    }
    CPU_SET(c, &cpus);
  }
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
  if (pid == 0) {
    setpgid(0, 0);  // own group: a terminal's Ctrl-C reaches the controller, which stops us
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the controller
    if (getppid() != parent) _exit(1);
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (!spec.cpus.empty() && sched_setaffinity(0, sizeof cpus, &cpus) != 0) {
      int err = -errno;  // negative: the pinning failed, not the exec
      ssize_t ignored = write(pipefd[1], &err, sizeof err);
      (void)ignored;
      _exit(127);
    }
    execve(argv[0], argv.data(), envp.data());
    int err = errno;
    ssize_t ignored = write(pipefd[1], &err, sizeof err);
    (void)ignored;
    _exit(127);
  }
  close(log_fd);
  close(pipefd[1]);
  int child_errno = 0;
  ssize_t n;
  do {
    n = read(pipefd[0], &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  close(pipefd[0]);
  if (n == sizeof child_errno && child_errno < 0) {
    waitpid(pid, nullptr, 0);
    return absl::InvalidArgumentError(absl::StrCat("cannot start ", spec.name, ": pinning to cpus ",
                                                   FormatCpuList(spec.cpus), ": ",
                                                   std::strerror(-child_errno)));
  }
  if (n == sizeof child_errno) {
    waitpid(pid, nullptr, 0);
    return absl::InvalidArgumentError(absl::StrCat("cannot start ", spec.name, ": exec ",
                                                   spec.argv[0], ": ", std::strerror(child_errno)));
  }
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
