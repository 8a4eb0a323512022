#include "common/process_identity.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/net_address.h"

namespace rlforge {

namespace {

std::optional<std::string> ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  return line;
}

std::optional<ProcStat> ReadProcStat(int64_t pid, const std::string& proc_root) {
  auto line = ReadFirstLine(absl::StrCat(proc_root, "/", pid, "/stat"));
  if (!line) return std::nullopt;
  return ParseProcStat(*line);
}

std::string BootId(const std::string& proc_root) {
  auto line = ReadFirstLine(proc_root + "/sys/kernel/random/boot_id");
  return line ? std::string(absl::StripAsciiWhitespace(*line)) : "";
}

}  // namespace

std::optional<ProcStat> ParseProcStat(const std::string& line) {
  // COMM is whatever the process named itself: the fields resume after its last ')'.
  const size_t close = line.rfind(')');
  if (close == std::string::npos || line.find('(') == std::string::npos) return std::nullopt;
  std::vector<std::string> fields = absl::StrSplit(line.substr(close + 1), ' ', absl::SkipEmpty());
  // fields[0] is field 3 (state), so field 22 (starttime) is fields[19].
  if (fields.size() < 20 || fields[0].size() != 1) return std::nullopt;
  ProcStat s;
  s.state = fields[0][0];
  if (!absl::SimpleAtoi(fields[19], &s.start_ticks)) return std::nullopt;
  return s;
}

ProcessIdentity SelfIdentity(const std::string& proc_root) {
  ProcessIdentity p;
  p.host = LocalHostName();
  p.pid = getpid();
  if (auto s = ReadProcStat(p.pid, proc_root)) p.start_ticks = s->start_ticks;
  p.boot_id = BootId(proc_root);
  return p;
}

LivenessCheck CheckProcess(const ProcessIdentity& p, const std::string& local_host,
                           const std::string& proc_root) {
  if (p.pid <= 0) return {Liveness::kUnknown, "no controller pid recorded"};
  if (!p.host.empty() && p.host != local_host) {
    return {Liveness::kUnknown, absl::StrCat("controller pid ", p.pid, " runs on host ", p.host,
                                             ", not this one (", local_host, ")")};
  }
  const std::string boot_id = BootId(proc_root);
  if (!p.boot_id.empty() && !boot_id.empty() && p.boot_id != boot_id) {
    return {Liveness::kGone,
            absl::StrCat("controller pid ", p.pid, " gone: the host has rebooted since")};
  }
  const std::optional<ProcStat> s = ReadProcStat(p.pid, proc_root);
  if (!s) return {Liveness::kGone, absl::StrCat("controller pid ", p.pid, " gone")};
  if (s->state == 'Z' || s->state == 'X') {
    return {Liveness::kGone, absl::StrCat("controller pid ", p.pid, " gone (exited, not reaped)")};
  }
  if (p.start_ticks == 0) {
    return {Liveness::kUnknown, absl::StrCat("pid ", p.pid,
                                             " exists, but no start time was recorded to tell "
                                             "it is the controller")};
  }
  if (s->start_ticks != p.start_ticks) {
    return {Liveness::kGone,
            absl::StrCat("controller pid ", p.pid, " gone (the pid is another process now)")};
  }
  return {Liveness::kAlive, absl::StrCat("controller pid ", p.pid, " alive")};
}

}  // namespace rlforge
