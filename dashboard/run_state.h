// RunState: what the dashboard shows, copied out of the controller's loop.
//
// controller thread: Set*/Add* (short copies under the mutex) -> Snapshot()
//   -> HTTP threads render JSON / Prometheus text from their own copy.
//
// Thread-safe: every method may be called from any thread. The controller never
// waits on a reader for longer than a copy takes, and readers never see a
// half-updated run. Iterations and samples are bounded (oldest dropped).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/clock.h"
#include "nlohmann/json.hpp"

namespace rlforge::dashboard {

// One actor as the registry knew it at the last publish.
struct ActorRow {
  std::string id;
  std::string role;
  int rank = 0;
  bool external = false;
  bool joined = false;  // a slot beyond the role's configured count, filled by a join
  std::string state;    // pending, ready, busy, dead, stopped, vacant, left
  std::string host;
  int pid = 0;
  int64_t last_heard_us = 0;  // on the state's clock; 0: never
  int restarts = 0;
  uint64_t current_work_id = 0;
  int64_t policy_version = -1;
  uint64_t works_done = 0;
  std::map<std::string, double> metrics;  // the actor's latest Metrics message
};

// A recent sample of a language job.
struct SampleRow {
  int64_t step = 0;
  std::string prompt;
  std::string response;
  double reward = 0;
};

struct RunInfo {
  std::string name;
  std::string algorithm;
  std::string job_id;
  std::string run_dir;
  std::string config_yaml;       // secrets already removed
  int64_t total_iterations = 0;  // 0 until the loop knows it (JobContext::SetTotalIterations)
  int64_t resumed_from = 0;      // the iteration this attempt resumed after; 0: a fresh run
};

// A consistent copy of everything, taken at one instant.
struct Snapshot {
  RunInfo info;
  std::string state = "starting";  // starting, running, waiting, finished, failed, ...
  std::string message;
  int64_t now_us = 0;    // when the copy was taken (state's clock)
  int64_t start_us = 0;  // when the state was created
  // metrics.jsonl records in step order; shared and immutable, so a copy is cheap.
  std::vector<std::shared_ptr<const nlohmann::json>> iterations;
  int64_t iterations_dropped = 0;  // older records no longer held
  std::vector<ActorRow> actors;
  std::map<std::string, uint64_t> drops;  // refused messages by reason
  std::vector<SampleRow> samples;
};

class RunState {
 public:
  RunState(const Clock* clock, size_t max_iterations, size_t max_samples);

  void SetInfo(RunInfo info);
  void SetTotalIterations(int64_t total);
  void SetState(const std::string& state, const std::string& message);
  // `record` is exactly the object appended to metrics.jsonl ({step, metrics, timings}).
  void AddIteration(nlohmann::json record);
  void SetActors(std::vector<ActorRow> actors, std::map<std::string, uint64_t> drops);
  void AddSamples(const std::vector<SampleRow>& samples);

  // Copies the run with the iterations after since_step (all for -1), at most
  // the latest `max_records` of them.
  Snapshot Take(int64_t since_step = -1, size_t max_records = SIZE_MAX) const;
  const Clock* clock() const { return clock_; }

 private:
  const Clock* clock_;
  const size_t max_iterations_;
  const size_t max_samples_;
  const int64_t start_us_;
  mutable std::mutex mu_;
  RunInfo info_;
  std::string state_ = "starting";
  std::string message_;
  struct Held {
    int64_t step;
    std::shared_ptr<const nlohmann::json> record;
  };
  std::deque<Held> iterations_;
  int64_t iterations_dropped_ = 0;
  std::vector<ActorRow> actors_;
  std::map<std::string, uint64_t> drops_;
  std::deque<SampleRow> samples_;
};

}  // namespace rlforge::dashboard
