// What a run tells the outside while it runs and when it ends: status.json, the dashboard's copy
// of the actors, the dashboard server and its lingering, TensorBoard's event file, and the
// log's last word.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/process_identity.h"
#include "config/job_config.h"
#include "controller/controller.h"
#include "controller/run_directory.h"
#include "dashboard/run_state.h"
#include "dashboard/server.h"
#include "dashboard/tensorboard_writer.h"
#include "nlohmann/json.hpp"

namespace rlforge {

// Each actor's latest metrics, by actor id.
using ActorMetrics = std::map<std::string, std::map<std::string, double>>;

// Copies the registry for the dashboard (on the loop thread).
void PublishActors(const Controller& c, const ActorMetrics& metrics, dashboard::RunState* state);

// The resolved config as the dashboard shows it: without the token.
std::string ShownConfig(const JobConfig& config);

// status.json and the dashboard's run state, kept in step. status.json names the controller
// (host, pid, its start time and the boot: `rlforge status` tells a dead run by them), the
// loop's iteration count once it is known, and where this attempt resumed.
class StatusWriter {
 public:
  StatusWriter(const RunDirectory* dir, const JobConfig* config)
      : dir_(dir), config_(config), self_(SelfIdentity()) {}
  void set_state(dashboard::RunState* state) { state_ = state; }
  void set_dashboard_url(std::string url) { url_ = std::move(url); }
  void Write(const std::string& state, const std::string& message) {
    state_name_ = state;
    message_ = message;
    nlohmann::json j{{"state", state},
                     {"message", message},
                     {"host", self_.host},
                     {"pid", self_.pid},
                     {"pid_start_ticks", self_.start_ticks},
                     {"boot_id", self_.boot_id},
                     {"algorithm", config_->job.algorithm->name}};
    if (!url_.empty()) j["dashboard_url"] = url_;
    if (state_ != nullptr) {
      const dashboard::RunInfo info = state_->Take(-1, 0).info;
      if (info.total_iterations > 0) j["total"] = info.total_iterations;
      j["resumed_from"] = info.resumed_from;
    }
    dir_->WriteFile("status.json", j.dump(2) + "\n").IgnoreError();
    if (state_ != nullptr) state_->SetState(state, message);
  }
  // The same state again, with what changed since (the loop's total).
  void Rewrite() { Write(state_name_, message_); }

 private:
  const RunDirectory* dir_;
  const JobConfig* config_;
  const ProcessIdentity self_;
  dashboard::RunState* state_ = nullptr;
  std::string url_;
  std::string state_name_ = "starting", message_;
};

// The dashboard server when dashboard.enabled (null otherwise).
absl::StatusOr<std::unique_ptr<dashboard::DashboardServer>> StartDashboard(
    const DashboardOptions& d, const std::string& token, dashboard::RunState* state);

// TensorBoard is a convenience copy of metrics.jsonl: without it the run goes on.
std::unique_ptr<dashboard::EventFileWriter> OpenTensorBoard(const JobConfig& config,
                                                            const RunDirectory& dir);

// The log's last word on the run and status.json's state.
void ReportOutcome(const absl::Status& status, int code, const std::string& run_dir,
                   const DropStats& drops, StatusWriter& status_file);

// dashboard.linger_s: the dashboard stays up after the run, until then or a signal.
void Linger(const dashboard::DashboardServer& server, double linger_s,
            const std::atomic<int>* stop);

}  // namespace rlforge
