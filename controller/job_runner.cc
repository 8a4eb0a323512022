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
#include "controller/actor_launch.h"
#include "controller/algorithm.h"
#include "controller/controller.h"
#include "controller/job_checkpoint.h"
#include "controller/job_keys.h"
#include "controller/run_context.h"
#include "controller/run_directory.h"
#include "controller/run_status.h"
#include "dashboard/progress.h"
#include "dashboard/run_state.h"
#include "dashboard/server.h"
#include "dashboard/tensorboard_writer.h"
#include "launch/process_launcher.h"
#include "launch/slurm_launcher.h"
#include "proto/zmq_transport.h"
#include "weights/weight_transport.h"
#include "spdlog/sinks/basic_file_sink.h"
#include "spdlog/sinks/stdout_color_sinks.h"

namespace rlforge {

namespace {

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
  RunContext job_ctx(&controller, &config, files.dir, sinks, files.resume,
                     defer_stop ? options.stop : nullptr);
  status = algorithm.Run(job_ctx);
  files.progress->Finish();
  return status;
}

// The dashboard's header for the run: the total is the loop's to say
// (JobContext::SetTotalIterations), 0 (not known) until then.
dashboard::RunInfo RunInfoFor(const JobConfig& config, const AttemptFiles& f,
                              const std::string& job_id) {
  dashboard::RunInfo info;
  info.name = f.dir->name();
  info.algorithm = config.job.algorithm->name;
  info.job_id = job_id;
  info.run_dir = f.dir->path();
  info.config_yaml = ShownConfig(config);
  info.resumed_from = f.resume != nullptr ? f.resume->step : 0;
  return info;
}

// The controller's sinks: its state into status.json and the run state, the actors' metrics
// for the dashboard, and what runs at every pump (PumpObserver).
void ConnectSinks(Controller& controller, const AttemptFiles& f, dashboard::RunState& run_state,
                  ActorMetrics& actor_metrics, const RunOptions* deferred,
                  std::atomic<int>& hard_stop) {
  f.status->set_state(&run_state);
  controller.set_status_sink([&f](const std::string& state, const std::string& message) {
    f.status->Write(state, message);
  });
  controller.set_metrics_sink([&actor_metrics](const std::string& actor, const proto::Metrics& m) {
    for (const auto& [k, v] : m.values()) actor_metrics[actor][k] = v;
  });
  PublishActors(controller, actor_metrics, &run_state);
  controller.set_pump_observer(
      PumpObserver(controller, actor_metrics, run_state, deferred, hard_stop));
}

// After the loop and the shutdown: the exit code and the log's last word.
int ReportAttempt(const Controller& controller, const absl::Status& status,
                  const RunOptions& options, const AttemptFiles& f, Attempt* attempt) {
  int code = ExitCodeFor(status, options.stop);
  // A worker that cannot work with the config ends the job as a job file refused at load does;
  // never a whole-job restart either (RunJob restarts on code 1 only).
  if (code == 1 && controller.stopped_on_config()) code = kConfigErrorExit;
  attempt->actor_lost = controller.faults().fatal_losses > 0;
  ReportOutcome(status, code, f.dir->path(), controller.drops(), *f.status);
  return code;
}

// The controller on its bound transport, its dashboard and the job; RunJob's exit code.
int RunController(const JobConfig& config, const RunOptions& options, const AttemptFiles& f,
                  Algorithm& algorithm, ServerTransport* transport, const std::string& endpoint,
                  Attempt* attempt) {
  const Controller::Options co = ControllerOptionsFor(config, *f.dir, f.actor_key_path, endpoint);
  ActorLaunch launch;
  absl::Status s = SetUpLaunch(config, algorithm.Roles(), &launch);
  if (!s.ok()) return FailBeforeRun(*f.status, "", s);
  // With checkpoints, the first signal waits for the iteration's end (the loop checkpoints and
  // stops); the controller itself stops at the second.
  const bool defer_stop = config.checkpoint.every > 0 && options.signals != nullptr;
  std::atomic<int> hard_stop{0};
  Controller controller(co, transport, RealClock::Get(), launch.launcher(),
                        defer_stop ? &hard_stop : options.stop);
  ExpectRoles(controller, algorithm.Roles(), config.launch);
  // events.jsonl: every failure, restart and rejoin of a worker, with its wall-clock time.
  auto events = MetricsLog::Open(f.dir->path() + "/events.jsonl");
  if (!events.ok()) return FailBeforeRun(*f.status, "", events.status());
  controller.set_fault_sink([&](const FaultEvent& e) { RecordFault(e, &*events); });
  // The dashboard reads a copy of the run that the loop refreshes (at most every 200 ms).
  dashboard::RunState run_state(RealClock::Get(), static_cast<size_t>(config.dashboard.max_points),
                                static_cast<size_t>(config.dashboard.max_samples));
  f.progress->SetResumedFrom(f.resume != nullptr ? f.resume->step : 0);
  run_state.SetInfo(RunInfoFor(config, f, co.job_id));
  ActorMetrics actor_metrics;
  ConnectSinks(controller, f, run_state, actor_metrics, defer_stop ? &options : nullptr, hard_stop);
  auto server = StartDashboard(config.dashboard, f.dashboard_token, &run_state);
  if (!server.ok()) return FailBeforeRun(*f.status, "", server.status());
  if (*server != nullptr) f.status->set_dashboard_url((*server)->url());
  std::unique_ptr<dashboard::EventFileWriter> tensorboard = OpenTensorBoard(config, *f.dir);
  const absl::Status status = LaunchAndRun(
      controller, config, options, f, launch, endpoint, algorithm,
      {f.metrics, &run_state, tensorboard.get(), f.progress, [&f] { f.status->Rewrite(); }},
      defer_stop);
  controller.Shutdown(status.ok() ? "job finished" : std::string(status.message()));
  PublishActors(controller, actor_metrics, &run_state);
  const int code = ReportAttempt(controller, status, options, f, attempt);
  if (*server != nullptr) Linger(**server, config.dashboard.linger_s, options.stop);
  return code;
}

// The job's keys and the controller's bound socket, then RunController; RunJob's exit code.
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
  return RunController(config, options, f, algorithm, transport->get(), (*transport)->endpoint(),
                       attempt);
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
  return config.job.algorithm->lm_engines &&
         IsGroupWeightTransport(ResolveWeightTransport(config));
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
