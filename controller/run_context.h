// RunContext: the JobContext of `rlforge run`, through which an algorithm's loop reports.
//
// IterationRecord -> metrics.jsonl (with the job's fault and elastic totals) -> dashboard run
// state -> TensorBoard -> progress bar
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "common/clock.h"
#include "config/job_config.h"
#include "controller/algorithm.h"
#include "controller/controller.h"
#include "controller/job_checkpoint.h"
#include "controller/run_directory.h"
#include "dashboard/progress.h"
#include "dashboard/run_state.h"
#include "dashboard/tensorboard_writer.h"

namespace rlforge {

// Where each iteration goes: metrics.jsonl, the dashboard, TensorBoard, the console.
struct IterationSinks {
  MetricsLog* log = nullptr;
  dashboard::RunState* state = nullptr;
  dashboard::EventFileWriter* tensorboard = nullptr;  // may be null
  dashboard::ProgressPrinter* progress = nullptr;
  std::function<void()> total_set;  // status.json rewritten with the loop's total
};

// The job as an algorithm's loop sees it (controller/algorithm.h): the controller, the config,
// the run directory, and where each iteration's record goes.
class RunContext final : public JobContext {
 public:
  RunContext(Controller* c, const JobConfig* cfg, const RunDirectory* dir, IterationSinks sinks,
             const JobCheckpoint* resume, const std::atomic<int>* deferred_stop)
      : controller_(c),
        config_(cfg),
        dir_(dir),
        sinks_(sinks),
        resume_(resume),
        deferred_stop_(deferred_stop),
        start_us_(RealClock::Get()->NowMicros()) {}
  const JobCheckpoint* resume_point() const override { return resume_; }
  int StopSignal() const override { return deferred_stop_ == nullptr ? 0 : deferred_stop_->load(); }
  Controller& controller() override { return *controller_; }
  const JobConfig& config() const override { return *config_; }
  const RunDirectory& run_dir() const override { return *dir_; }
  void SetTotalIterations(int64_t total) override {
    total_ = total;
    sinks_.state->SetTotalIterations(total);
    if (sinks_.total_set) sinks_.total_set();
  }
  void AddSamples(const std::vector<SampleRecord>& samples) override {
    sinks_.state->AddSamples(samples);
  }

  absl::Status EndIteration(const IterationRecord& rec) override;

 private:
  // TensorBoard is a convenience copy of metrics.jsonl: a failing write warns
  // once and stops the copy rather than the run.
  void WriteTensorBoard(const IterationRecord& rec, double elapsed);

  Controller* controller_;
  const JobConfig* config_;
  const RunDirectory* dir_;
  IterationSinks sinks_;
  const JobCheckpoint* resume_;
  const std::atomic<int>* deferred_stop_;  // null unless checkpoints defer Ctrl-C
  int64_t start_us_;
  int64_t total_ = 0;
};

}  // namespace rlforge
