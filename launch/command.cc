#include "launch/command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rlforge {

namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Reads both pipes until both close or the deadline passes; false on the deadline.
bool Drain(int out_fd, int err_fd, int64_t deadline_ms, CommandResult* r) {
  pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
  std::string* sinks[2] = {&r->out, &r->err};
  int open_fds = 2;
  char buf[4096];
  while (open_fds > 0) {
    const int64_t left = deadline_ms - NowMs();
    if (left <= 0) return false;
    int n = poll(fds, 2, static_cast<int>(left));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      ssize_t got = read(fds[i].fd, buf, sizeof buf);
      if (got > 0) {
        sinks[i]->append(buf, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv, double timeout_s) {
  if (argv.empty()) return absl::InvalidArgumentError("RunCommand: empty argv");
  const std::string what = absl::StrJoin(argv, " ");
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) return absl::UnavailableError("pipe: " + what);
  if (pipe2(err, O_CLOEXEC) != 0) {
    close(out[0]);
    close(out[1]);
    return absl::UnavailableError("pipe: " + what);
  }
  pid_t pid = fork();
  if (pid == 0) {
    int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execvp(args[0], args.data());
    dprintf(STDERR_FILENO, "cannot run %s: %s", args[0], strerror(errno));
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  if (pid < 0) {
    close(out[0]);
    close(err[0]);
    return absl::UnavailableError(absl::StrCat("fork for ", what, ": ", std::strerror(errno)));
  }
  CommandResult r;
  const int64_t deadline_ms = NowMs() + static_cast<int64_t>(timeout_s * 1000);
  bool done = Drain(out[0], err[0], deadline_ms, &r);
  close(out[0]);
  close(err[0]);
  int status = 0;
  // Its pipes closed; the exit follows, within the same deadline.
  while (done && waitpid(pid, &status, WNOHANG) == 0) {
    if (NowMs() >= deadline_ms) done = false;
    if (done) usleep(5000);
  }
  if (!done) {
    kill(pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return absl::DeadlineExceededError(
        absl::StrCat("`", what, "` did not finish within ", timeout_s, " s; killed it"));
  }
  r.exit_code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
  if (r.exit_code == 127 && r.err.rfind("cannot run ", 0) == 0) {
    return absl::NotFoundError(r.err);
  }
  return r;
}

}  // namespace rlforge
