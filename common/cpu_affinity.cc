#include "common/cpu_affinity.h"

#include <sched.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace rlforge {

absl::StatusOr<std::vector<int>> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) {
    return absl::UnavailableError(absl::StrCat("sched_getaffinity: ", std::strerror(errno)));
  }
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

absl::Status PinProcess(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) {
    if (c < 0 || c >= CPU_SETSIZE) {
      return absl::InvalidArgumentError(absl::StrCat("cpu ", c, " is out of range"));
    }
    CPU_SET(c, &set);
  }
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    pid_t tid = static_cast<pid_t>(std::stol(e.path().filename().string()));
    if (sched_setaffinity(tid, sizeof(set), &set) != 0 && errno != ESRCH) {
      return absl::UnavailableError(absl::StrCat("cannot pin thread ", tid, " to cpus ",
                                                 FormatCpuList(cpus), ": ", std::strerror(errno)));
    }
  }
  if (ec) return absl::UnavailableError(absl::StrCat("/proc/self/task: ", ec.message()));
  return absl::OkStatus();
}

std::string FormatCpuList(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += j == i ? std::to_string(cpus[i]) : absl::StrCat(cpus[i], "-", cpus[j]);
    i = j + 1;
  }
  return out;
}

SimPlacement PlanSimPlacement(const std::vector<int>& allowed, int workers,
                              int servers_per_worker) {
  SimPlacement p;
  const int n = static_cast<int>(allowed.size());
  if (n < 2 || workers < 1 || servers_per_worker < 1 || workers >= n) {
    p.why = absl::StrCat("not pinned: ", n, " cpu(s) for ", workers,
                         " worker(s) leave none for their servers");
    return p;
  }
  p.pinned = true;
  for (int w = 0; w < workers; ++w) p.worker_cpus.push_back({allowed[w]});
  const int rest = n - workers;
  for (int s = 0; s < workers * servers_per_worker; ++s) {
    p.server_cpus.push_back({allowed[workers + s % rest]});
  }
  std::vector<int> server_set(allowed.begin() + workers, allowed.end());
  if (workers * servers_per_worker < rest) server_set.resize(workers * servers_per_worker);
  p.why =
      absl::StrCat("workers on cpus ", FormatCpuList({allowed.begin(), allowed.begin() + workers}),
                   " (one each), their ", workers * servers_per_worker, " server(s) on cpus ",
                   FormatCpuList(server_set));
  return p;
}

}  // namespace rlforge
