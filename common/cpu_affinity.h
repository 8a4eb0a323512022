// CPU placement of rollout workers and the sim servers they step.
//
// allowed cpus (sched_getaffinity: honours taskset, cgroup and Slurm cpusets)
//   -> PlanSimPlacement -> per worker and per server cpu lists
//   -> ProcessSpec::cpus (servers, set in the child before exec) and
//      RolloutSetup.cpus (each worker pins every thread of its own process)
//
// Why: a worker alternates one batched policy forward (~0.1-0.2 ms) with one
// round trip to its servers (~0.01 ms). Spinning servers answer in
// microseconds, but a spinning server on the worker's core steals that
// forward's time, and a sleeping server on an idle vCPU takes tens of
// microseconds to wake. Workers on cores of their own, servers spinning on the
// others (yielding to each other), gives both: measured on a 2-core VM, two
// servers per worker went from 17-19 % bridge overhead to 12-15 % (README).
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace rlforge {

// CPUs this process may run on, ascending.
absl::StatusOr<std::vector<int>> AllowedCpus();

// Restricts every thread of the calling process to `cpus` (threads started
// later inherit it from their creator). A thread that exits meanwhile is skipped.
absl::Status PinProcess(const std::vector<int>& cpus);

// "0-3,8,10-11"
std::string FormatCpuList(const std::vector<int>& cpus);

struct SimPlacement {
  bool pinned = false;                        // false: nothing is pinned (and both lists are empty)
  std::vector<std::vector<int>> worker_cpus;  // [worker]
  std::vector<std::vector<int>> server_cpus;  // [worker * servers_per_worker + k]
  std::string why;                            // one line for the log
};

// Workers take the first cpus, one each; servers are dealt round-robin over
// the rest, so no server shares a worker's core. Not pinned when there are
// fewer than two cpus, or no more cpus than workers (nothing left for servers).
SimPlacement PlanSimPlacement(const std::vector<int>& allowed, int workers, int servers_per_worker);

}  // namespace rlforge
