#include "reward/python_reward.h"

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <mutex>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "reward/python_runner.h"

extern char** environ;

namespace rlforge::reward {

namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

Clock::time_point After(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(seconds));
}

// One Python process: `fd` is its stdin and stdout (one end of a socket pair).
struct Proc {
  pid_t pid = -1;
  int fd = -1;
  std::string buf;  // read, not yet a whole line
};

std::string ExitText(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exit ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const char* name = sigabbrev_np(WTERMSIG(status));
    return name ? absl::StrCat("SIG", name) : absl::StrCat("signal ", WTERMSIG(status));
  }
  return "stopped";
}

// Kills p (if running) and returns how it ended.
std::string Stop(Proc& p) {
  if (p.pid <= 0) return "not running";
  kill(p.pid, SIGKILL);
  int status = 0;
  while (waitpid(p.pid, &status, 0) < 0 && errno == EINTR) {
  }
  close(p.fd);
  p = Proc{};
  return ExitText(status);
}

enum class Read { kLine, kEof, kTimeout };

// The next line p writes, within `deadline`.
Read ReadLine(Proc& p, Clock::time_point deadline, std::string* line) {
  for (;;) {
    if (size_t nl = p.buf.find('\n'); nl != std::string::npos) {
      *line = p.buf.substr(0, nl);
      p.buf.erase(0, nl + 1);
      return Read::kLine;
    }
    // What is already there is read even at the deadline.
    const auto left = std::max<int64_t>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    pollfd pfd{p.fd, POLLIN, 0};
    const int n = poll(&pfd, 1, static_cast<int>(left));
    if (n == 0 && Clock::now() >= deadline) return Read::kTimeout;
    if (n <= 0) continue;  // EINTR, or woken before the deadline
    char chunk[65536];
    const ssize_t got = recv(p.fd, chunk, sizeof chunk, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return Read::kEof;
    p.buf.append(chunk, got);
  }
}

bool SendLine(const Proc& p, const std::string& line) {
  size_t sent = 0;
  while (sent < line.size()) {
    const ssize_t n = send(p.fd, line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += n;
  }
  return true;
}

std::string Where(const PythonRewardOptions& o) {
  return absl::StrCat("python reward ", o.path, ":", o.function);
}

// Starts one process and waits for the module's import.
absl::StatusOr<Proc> Spawn(const PythonRewardOptions& o) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return absl::InternalError(absl::StrCat(Where(o), ": socketpair: ", strerror(errno)));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, sv[1], 0);
  posix_spawn_file_actions_adddup2(&fa, sv[1], 1);
  std::vector<std::string> args = {o.python, "-u", "-c", kPythonRunner, o.path, o.function};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  Proc p;
  const int rc = posix_spawnp(&p.pid, o.python.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(sv[1]);
  p.fd = sv[0];
  if (rc != 0) {
    close(p.fd);
    return absl::FailedPreconditionError(
        absl::StrCat(Where(o), ": cannot start ", o.python, ": ", strerror(rc)));
  }
  std::string line;
  const Read r = ReadLine(p, After(o.start_timeout_s), &line);
  const Json j = r == Read::kLine ? Json::parse(line, nullptr, false) : Json();
  if (j.is_object() && j.contains("ready")) return p;
  const std::string how = Stop(p);
  if (j.is_object() && j.contains("import_error")) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(o), ": ", j["import_error"].get<std::string>()));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      Where(o), ": ", o.python,
      r == Read::kTimeout ? absl::StrCat(" did not import the module within ",
                                         o.start_timeout_s, " s")
                          : absl::StrCat(" ended before it was ready (", how, ")")));
}

SampleScore FromReply(const std::string& line) {
  const Json j = Json::parse(line, nullptr, false);
  if (j.is_object() && j.contains("score") && j["score"].is_number()) {
    return SampleScore::Ok(j["score"].get<double>());
  }
  if (j.is_object() && j.contains("nonfinite")) {
    const std::string v = j["nonfinite"].get<std::string>();
    const double inf = std::numeric_limits<double>::infinity();
    return SampleScore::Ok(v == "nan" ? std::nan("") : v == "-inf" ? -inf : inf);
  }
  if (j.is_object() && j.contains("error")) return SampleScore::Error(j["error"].get<std::string>());
  return SampleScore::Error(absl::StrCat("unreadable reply from the python process: ", line));
}

class PythonReward final : public Reward {
 public:
  PythonReward(PythonRewardOptions o, std::vector<Proc> procs)
      : o_(std::move(o)), procs_(std::move(procs)) {}
  ~PythonReward() override {
    for (Proc& p : procs_) Stop(p);
  }

  bool Batched() const override { return true; }
  SampleScore ScoreOne(const Sample& s) const override { return ScoreBatch({s})[0]; }
  std::vector<SampleScore> ScoreBatch(const std::vector<Sample>& batch) const override;

 private:
  struct Busy {
    size_t sample;
    Clock::time_point deadline;
  };
  bool Deal(size_t proc, const Sample& s) const;
  void Restart(size_t proc) const;
  // Waits for any busy process; fills `out` for those that answered, died or timed out.
  void Collect(std::vector<std::optional<Busy>>& busy, std::vector<SampleScore>& out,
               size_t* done) const;

  PythonRewardOptions o_;
  mutable std::mutex mu_;  // one batch at a time
  mutable std::vector<Proc> procs_;
  mutable std::string last_start_error_;
};

bool PythonReward::Deal(size_t i, const Sample& s) const {
  Json req = {{"prompt", s.prompt}, {"response", s.response}, {"answer", s.answer}};
  return SendLine(procs_[i], req.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n");
}

void PythonReward::Restart(size_t i) const {
  Stop(procs_[i]);
  absl::StatusOr<Proc> p = Spawn(o_);
  if (p.ok()) {
    procs_[i] = *p;
  } else {
    last_start_error_ = std::string(p.status().message());
  }
}

void PythonReward::Collect(std::vector<std::optional<Busy>>& busy, std::vector<SampleScore>& out,
                           size_t* done) const {
  std::vector<pollfd> fds;
  Clock::time_point first = Clock::time_point::max();
  for (size_t i = 0; i < busy.size(); ++i) {
    if (!busy[i]) continue;
    fds.push_back({procs_[i].fd, POLLIN, 0});
    first = std::min(first, busy[i]->deadline);
  }
  const auto wait_ms = std::max<int64_t>(
      0, std::chrono::duration_cast<std::chrono::milliseconds>(first - Clock::now()).count());
  poll(fds.data(), fds.size(), static_cast<int>(wait_ms));
  for (size_t i = 0; i < busy.size(); ++i) {
    if (!busy[i]) continue;
    const size_t k = busy[i]->sample;
    std::string line;
    const bool due = Clock::now() >= busy[i]->deadline;
    const Read r = ReadLine(procs_[i], Clock::now(), &line);  // only what is already there
    if (r == Read::kLine) {
      out[k] = FromReply(line);
    } else if (r == Read::kEof) {
      out[k] = SampleScore::Error(absl::StrCat("the python process ended while scoring (",
                                               Stop(procs_[i]), ")"));
      Restart(i);
    } else if (due) {
      out[k] = {0, ScoreStatus::kTimeout, absl::StrCat("timed out after ", o_.timeout_s, " s")};
      Restart(i);
    } else {
      continue;
    }
    busy[i].reset();
    ++*done;
  }
}

std::vector<SampleScore> PythonReward::ScoreBatch(const std::vector<Sample>& batch) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<SampleScore> out(batch.size());
  std::vector<std::optional<Busy>> busy(procs_.size());
  size_t next = 0, done = 0;
  while (done < batch.size()) {
    for (size_t i = 0; i < procs_.size() && next < batch.size(); ++i) {
      if (busy[i] || procs_[i].pid <= 0) continue;
      if (!Deal(i, batch[next])) {
        Restart(i);  // it died between batches; the sample goes to the next one
        continue;
      }
      busy[i] = Busy{next++, After(o_.timeout_s)};
    }
    if (std::none_of(busy.begin(), busy.end(), [](const auto& b) { return b.has_value(); })) {
      for (; next < batch.size(); ++next, ++done) {
        out[next] = SampleScore::Error(
            absl::StrCat("no python process is running: ", last_start_error_));
      }
      break;
    }
    Collect(busy, out, &done);
  }
  return out;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const Reward>> MakePythonReward(const PythonRewardOptions& o) {
  if (!std::filesystem::is_regular_file(o.path)) {
    return absl::NotFoundError(absl::StrCat(Where(o), ": no such file"));
  }
  if (o.workers < 1) return absl::InvalidArgumentError(absl::StrCat(Where(o), ": workers < 1"));
  std::vector<Proc> procs;
  for (int i = 0; i < o.workers; ++i) {
    absl::StatusOr<Proc> p = Spawn(o);
    if (!p.ok()) {
      for (Proc& q : procs) Stop(q);
      return p.status();
    }
    procs.push_back(*p);
  }
  return std::make_shared<PythonReward>(o, std::move(procs));
}

}  // namespace rlforge::reward
