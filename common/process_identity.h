// Which process a pid names, across pid reuse and reboots: a run's status.json records its
// controller's identity, and `rlforge status` asks whether that process still runs.
//
// writer: SelfIdentity() -> {host, pid, start_ticks, boot_id} -> status.json
// reader: status.json -> ProcessIdentity -> CheckProcess -> alive | gone | unknown (other host)
//
// A pid alone proves nothing once its process is gone: the kernel hands it to a later process.
// The start time (/proc/PID/stat field 22, clock ticks since boot) and the boot id
// (/proc/sys/kernel/random/boot_id) tell a later process from the recorded one; a zombie (killed,
// not yet reaped) is gone. Everything is read under `proc_root` ("/proc"), so tests can point it
// at a tree they made. Linux only. Safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace rlforge {

struct ProcessIdentity {
  std::string host;
  int64_t pid = 0;
  int64_t start_ticks = 0;  // 0: not recorded
  std::string boot_id;      // "": not recorded
};

// What /proc/PID/stat says of a process: its state letter and start time.
struct ProcStat {
  char state = '?';  // R, S, D, Z (zombie), X (dead), ...
  int64_t start_ticks = 0;
};
// Parses a /proc/PID/stat line ("PID (COMM) STATE ... STARTTIME ..."; COMM may hold spaces and
// parentheses); nullopt when it is not one.
std::optional<ProcStat> ParseProcStat(const std::string& line);

// This process, on this host (LocalHostName()).
ProcessIdentity SelfIdentity(const std::string& proc_root = "/proc");

enum class Liveness { kAlive, kGone, kUnknown };
struct LivenessCheck {
  Liveness liveness = Liveness::kUnknown;
  std::string why;  // e.g. "pid 41 gone", "pid 41 is another process now", "runs on host b"
};
// Whether the process `p` still runs, asked on host `local_host` whose /proc is `proc_root`.
// Another host: unknown (its pids say nothing here). No pid recorded: unknown. Without a
// recorded start time, a pid that exists is unknown too (it may be another process).
LivenessCheck CheckProcess(const ProcessIdentity& p, const std::string& local_host,
                           const std::string& proc_root = "/proc");

}  // namespace rlforge
