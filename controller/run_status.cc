#include "controller/run_status.h"

#include <chrono>
#include <thread>

#include "common/clock.h"
#include "common/logging.h"
#include "common/net_address.h"
#include "common/status.h"

namespace rlforge {

void PublishActors(const Controller& c, const ActorMetrics& metrics, dashboard::RunState* state) {
  std::vector<dashboard::ActorRow> rows;
  for (const ActorInfo* a : c.actors().All()) {
    // Elastic slots nobody joined yet are capacity, not actors.
    if (a->state == ActorState::kVacant && a->incarnation == 0) continue;
    dashboard::ActorRow r;
    r.id = a->id;
    r.role = a->role;
    r.rank = a->rank;
    r.external = a->external;
    r.joined = a->elastic;
    r.state = ActorStateName(a->state);
    r.host = a->host;
    r.pid = a->pid ? a->pid : a->launched_pid;
    r.last_heard_us = a->last_heard_us;
    r.restarts = a->restarts;
    r.current_work_id = a->current_work_id;
    r.policy_version = a->policy_version;
    r.works_done = a->works_done;
    if (auto it = metrics.find(a->id); it != metrics.end()) r.metrics = it->second;
    rows.push_back(std::move(r));
  }
  const DropStats& d = c.drops();
  state->SetActors(std::move(rows), {{"malformed", d.malformed},
                                     {"wrong_version", d.wrong_version},
                                     {"oversized", d.oversized},
                                     {"unknown_sender", d.unknown_sender},
                                     {"wrong_job", d.wrong_job},
                                     {"duplicate_results", d.duplicate_results},
                                     {"from_lost_actor", d.from_lost_actor},
                                     {"unauthenticated", d.unauthenticated}});
}

std::string ShownConfig(const JobConfig& config) {
  JobConfig copy = config;
  if (!copy.dashboard.token.empty()) copy.dashboard.token = "(hidden)";
  return ResolvedYaml(copy);
}

absl::StatusOr<std::unique_ptr<dashboard::DashboardServer>> StartDashboard(
    const DashboardOptions& d, const std::string& token, dashboard::RunState* state) {
  if (!d.enabled) return nullptr;
  dashboard::ServerOptions so;
  so.host = d.host;
  so.port = static_cast<int>(d.port);
  so.token = token;
  ASSIGN_OR_RETURN(auto server, dashboard::DashboardServer::Start(so, state));
  spdlog::info("dashboard at {}{}", server->url(),
               token.empty() ? "" : " (needs the token: add ?token=TOKEN)");
  return server;
}

std::unique_ptr<dashboard::EventFileWriter> OpenTensorBoard(const JobConfig& config,
                                                            const RunDirectory& dir) {
  if (!config.dashboard.tensorboard) return nullptr;
  auto tb =
      dashboard::EventFileWriter::Create(dir.path(), dashboard::WallTimeSeconds(), LocalHostName());
  if (tb.ok()) return std::move(*tb);
  spdlog::warn("no TensorBoard events: {}", Msg(tb.status()));
  return nullptr;
}

void ReportOutcome(const absl::Status& status, int code, const std::string& run_dir,
                   const DropStats& drops, StatusWriter& status_file) {
  if (status.ok()) {
    spdlog::info("job finished; results in {}", run_dir);
    status_file.Write("finished", "");
  } else if (code > 128) {
    spdlog::warn("job stopped: {}; results so far in {}", Msg(status), run_dir);
    status_file.Write("interrupted", std::string(status.message()));
  } else {
    spdlog::error("job failed: {}", Msg(status));
    spdlog::error("run directory: {}", run_dir);
    status_file.Write("failed", std::string(status.message()));
  }
  if (drops.total() > 0) {
    spdlog::warn("the controller dropped {} bad message(s) during the run", drops.total());
  }
  if (drops.unauthenticated > 0) {
    spdlog::warn("the controller refused {} connection(s) without this job's CURVE key",
                 drops.unauthenticated);
  }
}

void Linger(const dashboard::DashboardServer& server, double linger_s,
            const std::atomic<int>* stop) {
  if (linger_s <= 0) return;
  spdlog::info("dashboard stays up for {} s at {} (dashboard.linger_s; Ctrl-C ends it)", linger_s,
               server.url());
  const int64_t until = RealClock::Get()->NowMicros() + static_cast<int64_t>(linger_s * 1e6);
  while (RealClock::Get()->NowMicros() < until && (stop == nullptr || stop->load() == 0)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace rlforge
