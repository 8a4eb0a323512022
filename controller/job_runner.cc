#include "controller/job_runner.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "common/logging.h"
#include "common/net_address.h"
#include "common/process_identity.h"
#include "common/status.h"
#include "config/dashboard_config.h"
#include "controller/actor_placement.h"
#include "controller/algorithm.h"
#include "controller/controller.h"
#include "controller/job_checkpoint.h"
#include "controller/job_keys.h"
#include "controller/run_directory.h"
#include "dashboard/progress.h"
#include "dashboard/run_state.h"
#include "dashboard/server.h"
#include "dashboard/tensorboard_writer.h"
#include "launch/process_launcher.h"
#include "launch/slurm_launcher.h"
#include "proto/zmq_transport.h"
#include "spdlog/sinks/basic_file_sink.h"
#include "spdlog/sinks/stdout_color_sinks.h"

namespace rlforge {

namespace {

// Where each iteration goes: metrics.jsonl, the dashboard, TensorBoard, the console.
struct IterationSinks {
  MetricsLog* log = nullptr;
  dashboard::RunState* state = nullptr;
  dashboard::EventFileWriter* tensorboard = nullptr;  // may be null
  dashboard::ProgressPrinter* progress = nullptr;
  std::function<void()> total_set;  // status.json rewritten with the loop's total
};

class Context final : public JobContext {
 public:
  Context(Controller* c, const JobConfig* cfg, const RunDirectory* dir, IterationSinks sinks,
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

  absl::Status EndIteration(const IterationRecord& rec) override {
    double elapsed = static_cast<double>(RealClock::Get()->NowMicros() - start_us_) * 1e-6;
    nlohmann::json j;
    j["step"] = rec.step;
    j["metrics"] = rec.metrics;
    const FaultStats& f = controller_->faults();
    if (f.actors_lost > 0) {  // the job's totals, once a worker was lost
      j["metrics"]["faults/actors_lost"] = f.actors_lost;
      j["metrics"]["faults/restarts"] = f.restarts;
      j["metrics"]["faults/works_given_back"] = f.works_given_back;
    }
    const ElasticStats& el = controller_->elastic();
    if (el.joins > 0 || el.leaves > 0) {  // the job's totals, once a worker joined or left
      j["metrics"]["elastic/joins"] = el.joins;
      j["metrics"]["elastic/leaves"] = el.leaves;
      j["metrics"]["elastic/works_handed_back"] = el.works_handed_back;
    }
    j["timings"] = rec.timings;
    j["timings"]["elapsed_s"] = elapsed;
    RETURN_IF_ERROR(sinks_.log->Append(j));
    sinks_.state->AddIteration(j);
    WriteTensorBoard(rec, elapsed);
    int64_t total = total_ > 0 ? total_ : config_->job.iterations;
    sinks_.progress->Update(rec.step, total, elapsed, rec.metrics, rec.timings);
    return absl::OkStatus();
  }

 private:
  // TensorBoard is a convenience copy of metrics.jsonl: a failing write warns
  // once and stops the copy rather than the run.
  void WriteTensorBoard(const IterationRecord& rec, double elapsed) {
    if (sinks_.tensorboard == nullptr) return;
    std::map<std::string, double> scalars;
    for (const auto& [k, v] : rec.metrics) scalars["metrics/" + k] = v;
    for (const auto& [k, v] : rec.timings) scalars["timings/" + k] = v;
    scalars["timings/elapsed_s"] = elapsed;
    absl::Status s =
        sinks_.tensorboard->WriteScalars(rec.step, dashboard::WallTimeSeconds(), scalars);
    if (!s.ok()) {
      spdlog::warn("TensorBoard events stop here: {}", Msg(s));
      sinks_.tensorboard = nullptr;
    }
  }

  Controller* controller_;
  const JobConfig* config_;
  const RunDirectory* dir_;
  IterationSinks sinks_;
  const JobCheckpoint* resume_;
  const std::atomic<int>* deferred_stop_;  // null unless checkpoints defer Ctrl-C
  int64_t start_us_;
  int64_t total_ = 0;
};

// Copies the registry for the dashboard (on the loop thread).
using ActorMetrics = std::map<std::string, std::map<std::string, double>>;  // by actor id

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

// The resolved config as the dashboard shows it: without the token.
std::string ShownConfig(const JobConfig& config) {
  JobConfig copy = config;
  if (!copy.dashboard.token.empty()) copy.dashboard.token = "(hidden)";
  return ResolvedYaml(copy);
}

std::string NewJobId(const std::string& name) {
  std::random_device rd;
  return absl::StrFormat("%s-%08x", name, rd());
}

// On a terminal, log lines print above the progress bar rather than into it.
void SetUpControllerLog(const RunDirectory& dir, const std::string& level,
                        const std::shared_ptr<dashboard::ProgressPrinter>& progress,
                        bool interactive) {
  spdlog::sink_ptr console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  if (interactive) console = dashboard::MakeBarAwareSink(console, progress);
  auto file = std::make_shared<spdlog::sinks::basic_file_sink_mt>(dir.LogPath("controller"));
  auto logger =
      std::make_shared<spdlog::logger>("controller", spdlog::sinks_init_list{console, file});
  logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %n %^%l%$ %v");
  logger->set_level(spdlog::level::from_str(level));
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

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

// launch.backend's launcher and, under Slurm, the node and GPUs of every launched actor.
struct ActorLaunch {
  LocalProcessLauncher local;
  std::unique_ptr<SlurmProcessLauncher> slurm;
  std::map<std::string, ActorPlace> places;  // by actor id; empty for the local backend
  ProcessLauncher* launcher() {
    if (slurm) return slurm.get();
    return &local;
  }
  void Place(ProcessSpec& spec) const {
    if (auto it = places.find(spec.name); it != places.end()) {
      spec.host = it->second.node;
      spec.gpus = it->second.gpus;
    }
  }
};

absl::Status SetUpLaunch(const JobConfig& config, const std::vector<RoleRequirement>& roles,
                         ActorLaunch* out) {
  if (!UnderSlurm(config.launch)) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::vector<std::string> allocation, AllocationNodes(30));
  ASSIGN_OR_RETURN(std::vector<std::string> nodes, JobNodes(config, std::move(allocation)));
  ASSIGN_OR_RETURN(std::vector<RoleSlots> slots, PlacementSlots(config, roles));
  ASSIGN_OR_RETURN(out->places, PlaceActors(slots, nodes));
  out->slurm = std::make_unique<SlurmProcessLauncher>(&out->local);
  for (const auto& [id, place] : out->places) {
    spdlog::info("{} runs on {}{}", id, place.node,
                 place.gpus > 0 ? absl::StrCat(" with ", place.gpus, " GPU(s)") : "");
  }
  return absl::OkStatus();
}

// Where actors join: tcp://HOST:PORT with the host other hosts reach this one by
// (controller.advertise_host, the bound address, or this host's name for a wildcard bind).
std::string JoinAddress(const std::string& endpoint, const ControllerOptions& c) {
  const size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos) return endpoint;
  return absl::StrCat("tcp://", AdvertisedHost(c.host, c.advertise_host, LocalHostName()),
                      endpoint.substr(colon));
}

// Where launched actors connect: Slurm steps on other nodes as any other host joins; local
// children reach a wildcard bind over loopback.
std::string ActorConnectAddress(const std::string& endpoint, const JobConfig& config) {
  if (UnderSlurm(config.launch)) return JoinAddress(endpoint, config.controller);
  const std::string wildcard = "tcp://0.0.0.0:";
  if (endpoint.rfind(wildcard, 0) != 0) return endpoint;
  return "tcp://127.0.0.1:" + endpoint.substr(wildcard.size());
}

// rlforge-store's command line: at controller.store_port, reachable (and advertised) where the
// controller is; a loopback-only job keeps its store on loopback.
std::vector<std::string> StoreArgv(const std::string& exe, const ControllerOptions& c,
                                   const std::string& address_file) {
  const bool local = IsLoopbackHost(c.host) && c.advertise_host.empty();
  const std::string here = IsWildcardHost(c.host) || IsLoopbackHost(c.host) ? "127.0.0.1" : c.host;
  std::vector<std::string> argv = {
      exe, "--host", here, "--port", std::to_string(c.store_port), "--address-file", address_file};
  if (!local) {
    argv.push_back("--advertise");
    argv.push_back(AdvertisedHost(c.host, c.advertise_host, LocalHostName()));
  }
  return argv;
}

// Starts rlforge-store, the trainer ranks' rendezvous point for the job's lifetime (a service:
// its exit stops the job, and shutdown stops it), and gives the controller its host:port once
// it listens. Its own process, so that this one never loads libtorch.
absl::Status StartTrainerStore(Controller& controller, const RunDirectory& dir,
                               const RunOptions& options, const ControllerOptions& c) {
  const double timeout_s = c.register_timeout_s;
  const std::string file = dir.path() + "/trainer_store.address";
  // A resumed or restarted job runs in the same directory: the last store's address is stale.
  std::error_code ec;
  std::filesystem::remove(file, ec);
  ProcessSpec spec;
  spec.name = "trainer-store";
  spec.argv = StoreArgv(StoreExecutable(options.self_exe), c, file);
  spec.log_path = dir.LogPath(spec.name);
  controller.set_awaiting_trainer_store();  // actors that join by address may come first
  RETURN_IF_ERROR(controller.LaunchService(spec));
  const int64_t deadline = RealClock::Get()->NowMicros() + static_cast<int64_t>(timeout_s * 1e6);
  while (true) {
    std::ifstream in(file);
    std::string address;
    if (in >> address) {  // written whole (renamed into place)
      spdlog::info("trainer ranks meet at {}", address);
      controller.set_trainer_store_address(address);
      return absl::OkStatus();
    }
    RETURN_IF_ERROR(controller.Pump(50));  // notices the store's exit, with its log
    if (RealClock::Get()->NowMicros() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "the trainer ranks' rendezvous store did not report its address in ", file, " within ",
          timeout_s, " s (controller.register_timeout_s); its log: ", spec.log_path));
    }
  }
}

// Several trainer ranks meet at the store; so do trainer rank 0 and the engines of a language
// model job whose weights travel by gloo broadcast.
bool NeedsStore(const Controller& controller, const JobConfig& config) {
  return NeedsTrainerStore(config, controller.actors().CountOfRole(kTrainerRole));
}

// `rlforge run --resume`: the newest complete checkpoint of `dir` into *out (none: the job
// starts over in the same folder), with metrics.jsonl cut back to its step.
absl::Status FindResumePoint(const RunDirectory& dir, std::optional<JobCheckpoint>* out) {
  std::vector<std::string> skipped;
  ASSIGN_OR_RETURN(*out, FindNewestCheckpoint(dir.path(), &skipped));
  for (const std::string& why : skipped) spdlog::warn("{}; skipping it", why);
  if (out->has_value()) {
    spdlog::info("resuming from checkpoint {} (iteration {})", (*out)->dir, (*out)->step);
  } else {
    spdlog::warn("{} has no complete checkpoint: starting the job over in it", dir.path());
  }
  return TruncateMetrics(dir.path() + "/metrics.jsonl", out->has_value() ? (*out)->step : -1);
}

// events.jsonl: a whole-job restart, beside the workers' failures.
void RecordJobRestart(const std::string& run_dir, int64_t restart) {
  auto events = MetricsLog::Open(run_dir + "/events.jsonl");
  absl::Status s = events.ok() ? events->Append({{"time", dashboard::WallTimeSeconds()},
                                                 {"event", "job_restart"},
                                                 {"restart", restart}})
                               : events.status();
  if (!s.ok()) spdlog::warn("events.jsonl: {}", Msg(s));
}

// A job that a signal asked to stop was stopped by it, whichever error ended its loop: scancel
// signals the controller and every step at once, and an actor's exit may be seen first.
int ExitCodeFor(const absl::Status& s, const std::atomic<int>* stop) {
  if (s.ok()) return 0;
  if (stop != nullptr && stop->load() != 0) return 128 + stop->load();
  return 1;
}

}  // namespace

namespace {

Controller::Options ControllerOptionsFor(const JobConfig& config, const RunDirectory& dir,
                                         const std::string& actor_keys_path,
                                         const std::string& endpoint) {
  Controller::Options co;
  co.job_id = NewJobId(dir.name());
  co.config_yaml = ResolvedYaml(config);
  co.run_dir = dir.path();
  co.actor_keys_path = actor_keys_path;
  co.heartbeat_interval_ms = config.controller.heartbeat_interval_ms;
  co.heartbeat_misses = config.controller.heartbeat_misses;
  co.register_timeout_s = config.controller.register_timeout_s;
  co.request_timeout_s = config.controller.request_timeout_s;
  co.setup_timeout_s = config.controller.setup_timeout_s;
  co.shutdown_grace_s = config.controller.shutdown_grace_s;
  co.collective_timeout_s = config.trainer.collective_timeout_s;
  co.join_address = JoinAddress(endpoint, config.controller);
  co.max_restarts = config.launch.max_restarts;
  co.restart_backoff_s = config.launch.restart_backoff_s;
  return co;
}

// events.jsonl: every failure, restart, rejoin, join and leave of a worker, with its wall-clock
// time.
void RecordFault(const FaultEvent& e, MetricsLog* events) {
  nlohmann::json j{{"time", dashboard::WallTimeSeconds()},
                   {"event", e.kind},
                   {"actor", e.actor_id},
                   {"detail", e.detail}};
  if (e.kind == "left") j["works_given_back"] = e.works_given_back;
  if (e.kind == "lost") {
    j["works_given_back"] = e.works_given_back;
    j["silent_s"] = e.silent_s;
  }
  if (e.kind == "rejoined") j["down_s"] = e.down_s;
  absl::Status s = events->Append(j);
  if (!s.ok()) spdlog::warn("events.jsonl: {}", Msg(s));
}

// The dashboard server when dashboard.enabled (null otherwise).
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

// TensorBoard is a convenience copy of metrics.jsonl: without it the run goes on.
std::unique_ptr<dashboard::EventFileWriter> OpenTensorBoard(const JobConfig& config,
                                                            const RunDirectory& dir) {
  if (!config.dashboard.tensorboard) return nullptr;
  auto tb =
      dashboard::EventFileWriter::Create(dir.path(), dashboard::WallTimeSeconds(), LocalHostName());
  if (tb.ok()) return std::move(*tb);
  spdlog::warn("no TensorBoard events: {}", Msg(tb.status()));
  return nullptr;
}

// The log's last word on the run and status.json's state.
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

// dashboard.linger_s: the dashboard stays up after the run, until then or a signal.
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

// How the controller starts one of its actors (before placement).
ProcessSpec LaunchedActorSpec(const ActorInfo& a, const std::string& self_exe,
                              const std::string& log_level, const std::string& connect,
                              const std::string& log_path, const std::string& actor_key_path) {
  ProcessSpec spec;
  spec.name = a.id;
  // rlforge-actor directly: `rlforge actor` would only exec it.
  spec.argv = {ActorExecutable(self_exe),
               "--role",
               a.role,
               "--rank",
               std::to_string(a.rank),
               "--connect",
               connect,
               "--log-level",
               log_level};
  spec.log_path = log_path;
  // libgomp reads this before main(): idle OpenMP threads must not spin
  // against OpenBLAS's own threads (measured: 40% of a 2-core machine).
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) spec.env["OMP_WAIT_POLICY"] = "PASSIVE";
  // Empty without CURVE: a RLFORGE_KEYS of the caller must not reach a plaintext job.
  spec.env[kKeysEnv] = actor_key_path;
  return spec;
}

// What a restart of a failed attempt needs to know.
struct Attempt {
  std::string run_dir;      // "" when the run directory could not be made
  bool actor_lost = false;  // it failed after losing an actor that could not be replaced
};

// Every role the algorithm needs, as the controller should expect it.
void ExpectRoles(Controller& controller, const std::vector<RoleRequirement>& roles,
                 const LaunchOptions& launch) {
  for (const RoleRequirement& r : roles) {
    controller.ExpectRole(r.role, r.count, r.external || EveryRoleJoins(launch), r.recoverable);
    if (r.elastic) controller.AllowJoins(r.role, r.max_count);
  }
}

// What runs at every pump of the controller: with `deferred` (checkpoints and signals), the
// first signal is announced and left for the loop (it checkpoints at the iteration's end and
// stops) and a second one stops the controller through `hard_stop`; and the dashboard's copy
// of the actors is refreshed at most every 200 ms.
std::function<void()> PumpObserver(Controller& controller, ActorMetrics& actor_metrics,
                                   dashboard::RunState& run_state, const RunOptions* deferred,
                                   std::atomic<int>& hard_stop) {
  return [&controller, &actor_metrics, &run_state, deferred, &hard_stop,
          last_publish_us = int64_t{0}, announced = false]() mutable {
    if (deferred != nullptr && deferred->stop->load() != 0) {
      if (!announced) {
        spdlog::warn(
            "signal {}: checkpointing once this iteration ends, then stopping (again: "
            "stop at once)",
            deferred->stop->load());
        announced = true;
      }
      if (deferred->signals->load() >= 2) hard_stop.store(deferred->stop->load());
    }
    const int64_t now = RealClock::Get()->NowMicros();
    if (now - last_publish_us < 200'000) return;
    last_publish_us = now;
    PublishActors(controller, actor_metrics, &run_state);
  };
}

// What an attempt opened before its controller starts: the run directory and its files.
struct AttemptFiles {
  RunDirectory* dir = nullptr;
  StatusWriter* status = nullptr;
  MetricsLog* metrics = nullptr;
  const JobCheckpoint* resume = nullptr;  // null: a fresh run
  dashboard::ProgressPrinter* progress = nullptr;
  std::string dashboard_token;
  std::string actor_key_path;  // "" without CURVE
};

// An error before the job runs: logged (what is wrong, with the key it is about) and in
// status.json; the exit code.
int FailBeforeRun(StatusWriter& status_file, const std::string& key, const absl::Status& s) {
  spdlog::error("{}{}", key.empty() ? "" : key + ": ", Msg(s));
  status_file.Write("failed", std::string(s.message()));
  return 1;
}

// The actors launched and registered, then the algorithm's loop; the loop's status.
absl::Status LaunchAndRun(Controller& controller, const JobConfig& config,
                          const RunOptions& options, const AttemptFiles& files, ActorLaunch& launch,
                          const std::string& endpoint, Algorithm& algorithm, IterationSinks sinks,
                          bool defer_stop) {
  files.status->Write("starting", "");
  const std::string connect = ActorConnectAddress(endpoint, config);
  absl::Status status = NeedsStore(controller, config)
                            ? StartTrainerStore(controller, *files.dir, options, config.controller)
                            : absl::OkStatus();
  auto actor_spec = [&](const ActorInfo& a) {
    ProcessSpec spec =
        LaunchedActorSpec(a, options.self_exe, std::string(ChoiceName(config.job.log_level)),
                          connect, files.dir->LogPath(a.id), files.actor_key_path);
    launch.Place(spec);
    return spec;
  };
  if (status.ok()) status = controller.LaunchAll(actor_spec);
  if (status.ok()) status = controller.WaitForActors();
  if (!status.ok()) return status;
  files.status->Write("running", "");
  spdlog::info("all {} actors registered; running {}", controller.actors().ConfiguredCount(),
               config.job.algorithm->name);
  Context job_ctx(&controller, &config, files.dir, sinks, files.resume,
                  defer_stop ? options.stop : nullptr);
  status = algorithm.Run(job_ctx);
  files.progress->Finish();
  return status;
}

// The controller, its dashboard and the job, once the run directory is open; RunJob's exit
// code.
int ServeAttempt(const JobConfig& config, const RunOptions& options, const AttemptFiles& files,
                 Algorithm& algorithm, Attempt* attempt) {
  auto security = PrepareJobSecurity(config.controller, files.dir->path());
  if (!security.ok()) return FailBeforeRun(*files.status, "controller.security", security.status());
  WarnPlaintextSockets(config);
  zmq::context_t ctx;
  ZmqOptions zo;
  zo.limits.max_message_bytes = static_cast<size_t>(config.controller.max_message_mb) << 20;
  zo.curve = security->controller_keys;
  auto transport = ZmqServerTransport::Bind(
      ctx, absl::StrCat("tcp://", config.controller.host, ":", config.controller.port), zo);
  if (!transport.ok()) {
    return FailBeforeRun(*files.status, "controller.host/controller.port", transport.status());
  }
  spdlog::info("controller listening on {}", (*transport)->endpoint());
  AttemptFiles f = files;
  f.actor_key_path = security->actor_key_path;
  const Controller::Options co =
      ControllerOptionsFor(config, *f.dir, f.actor_key_path, (*transport)->endpoint());
  ActorLaunch launch;
  absl::Status s = SetUpLaunch(config, algorithm.Roles(), &launch);
  if (!s.ok()) return FailBeforeRun(*f.status, "", s);
  // With checkpoints, the first signal waits for the iteration's end (the loop checkpoints and
  // stops); the controller itself stops at the second.
  const bool defer_stop = config.checkpoint.every > 0 && options.signals != nullptr;
  std::atomic<int> hard_stop{0};
  Controller controller(co, transport->get(), RealClock::Get(), launch.launcher(),
                        defer_stop ? &hard_stop : options.stop);
  ExpectRoles(controller, algorithm.Roles(), config.launch);
  // events.jsonl: every failure, restart and rejoin of a worker, with its wall-clock time.
  auto events = MetricsLog::Open(f.dir->path() + "/events.jsonl");
  if (!events.ok()) return FailBeforeRun(*f.status, "", events.status());
  controller.set_fault_sink([&](const FaultEvent& e) { RecordFault(e, &*events); });

  // The dashboard reads a copy of the run that the loop refreshes (at most every 200 ms).
  dashboard::RunState run_state(RealClock::Get(), static_cast<size_t>(config.dashboard.max_points),
                                static_cast<size_t>(config.dashboard.max_samples));
  // The total is the loop's to say (JobContext::SetTotalIterations): 0 (not known) until then.
  dashboard::RunInfo info;
  info.name = f.dir->name();
  info.algorithm = config.job.algorithm->name;
  info.job_id = co.job_id;
  info.run_dir = f.dir->path();
  info.config_yaml = ShownConfig(config);
  info.resumed_from = f.resume != nullptr ? f.resume->step : 0;
  f.progress->SetResumedFrom(info.resumed_from);
  run_state.SetInfo(std::move(info));
  f.status->set_state(&run_state);
  controller.set_status_sink([&](const std::string& state, const std::string& message) {
    f.status->Write(state, message);
  });
  ActorMetrics actor_metrics;
  controller.set_metrics_sink([&](const std::string& actor, const proto::Metrics& m) {
    for (const auto& [k, v] : m.values()) actor_metrics[actor][k] = v;
  });
  PublishActors(controller, actor_metrics, &run_state);
  controller.set_pump_observer(PumpObserver(controller, actor_metrics, run_state,
                                            defer_stop ? &options : nullptr, hard_stop));
  auto server = StartDashboard(config.dashboard, f.dashboard_token, &run_state);
  if (!server.ok()) return FailBeforeRun(*f.status, "", server.status());
  if (*server != nullptr) f.status->set_dashboard_url((*server)->url());
  std::unique_ptr<dashboard::EventFileWriter> tensorboard = OpenTensorBoard(config, *f.dir);

  const absl::Status status = LaunchAndRun(
      controller, config, options, f, launch, (*transport)->endpoint(), algorithm,
      {f.metrics, &run_state, tensorboard.get(), f.progress, [&f] { f.status->Rewrite(); }},
      defer_stop);
  controller.Shutdown(status.ok() ? "job finished" : std::string(status.message()));
  PublishActors(controller, actor_metrics, &run_state);
  int code = ExitCodeFor(status, options.stop);
  // A worker that cannot work with the config ends the job as a job file refused at load does;
  // never a whole-job restart either (RunJob restarts on code 1 only).
  if (code == 1 && controller.stopped_on_config()) code = kConfigErrorExit;
  attempt->actor_lost = controller.faults().fatal_losses > 0;
  ReportOutcome(status, code, f.dir->path(), controller.drops(), *f.status);
  if (*server != nullptr) Linger(**server, config.dashboard.linger_s, options.stop);
  return code;
}

// One attempt at the job; returns RunJob's exit code.
int RunAttempt(const JobConfig& config, const RunOptions& options, Attempt* attempt) {
  auto token = ResolveDashboardToken(config.dashboard, std::getenv("RLFORGE_DASHBOARD_TOKEN"));
  if (!token.ok()) {
    std::fprintf(stderr, "error: %s\n", Msg(token.status()).c_str());
    return 2;
  }
  const bool resuming = !options.resume_dir.empty();
  auto dir = resuming ? RunDirectory::Open(options.resume_dir)
                      : RunDirectory::Create(config.job.run_root, config.job.name);
  if (!dir.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(dir.status().message()).c_str());
    return 1;
  }
  auto progress = std::make_shared<dashboard::ProgressPrinter>(stdout, options.interactive,
                                                               config.job.algorithm->name);
  SetUpControllerLog(*dir, std::string(ChoiceName(config.job.log_level)), progress,
                     options.interactive);
  spdlog::info("run directory {}", dir->path());
  attempt->run_dir = dir->path();
  StatusWriter status_file(&*dir, &config);
  std::optional<JobCheckpoint> resume;
  absl::Status written = resuming ? FindResumePoint(*dir, &resume)
                                  : dir->WriteFile("config.resolved.yaml", ResolvedYaml(config));
  auto metrics = MetricsLog::Open(dir->path() + "/metrics.jsonl");
  auto algorithm = CreateAlgorithm(config);
  for (const absl::Status& s : {written, metrics.status(), algorithm.status()}) {
    if (!s.ok()) return FailBeforeRun(status_file, "", s);
  }
  AttemptFiles files;
  files.dir = &*dir;
  files.status = &status_file;
  files.metrics = &*metrics;
  files.resume = resume ? &*resume : nullptr;
  files.progress = progress.get();
  files.dashboard_token = *token;
  return ServeAttempt(config, options, files, **algorithm, attempt);
}

}  // namespace

bool NeedsTrainerStore(const JobConfig& config, int trainer_ranks) {
  if (trainer_ranks > 1) return true;
  return config.job.algorithm->lm_engines && IsGroupWeightTransport(LmWeightTransport(config));
}

int RunJob(const JobConfig& config, const RunOptions& options) {
  RunOptions next = options;
  for (int64_t restarts = 0;; ++restarts) {
    Attempt attempt;
    const int code = RunAttempt(config, next, &attempt);
    const bool stopped = options.stop != nullptr && options.stop->load() != 0;
    if (code != 1 || !attempt.actor_lost || stopped || attempt.run_dir.empty() ||
        restarts >= config.launch.max_job_restarts) {
      if (code == 1 && attempt.actor_lost && config.launch.max_job_restarts > 0) {
        spdlog::error("no job restarts left ({} of launch.max_job_restarts used)", restarts);
      }
      return code;
    }
    spdlog::warn(
        "restarting the job from its newest checkpoint in {} (job restart {} of {}, "
        "launch.max_job_restarts)",
        attempt.run_dir, restarts + 1, config.launch.max_job_restarts);
    RecordJobRestart(attempt.run_dir, restarts + 1);
    next.resume_dir = attempt.run_dir;
  }
}

}  // namespace rlforge
