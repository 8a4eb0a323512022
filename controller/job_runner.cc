#include "controller/job_runner.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "common/logging.h"
#include "common/status.h"
#include "controller/algorithm.h"
#include "controller/controller.h"
#include "controller/run_directory.h"
#include "launch/process_launcher.h"
#include "proto/zmq_transport.h"
#include "spdlog/sinks/basic_file_sink.h"
#include "spdlog/sinks/stdout_color_sinks.h"

namespace rlforge {

namespace {

class Context final : public JobContext {
 public:
  Context(Controller* c, const JobConfig* cfg, const RunDirectory* dir, MetricsLog* log)
      : controller_(c),
        config_(cfg),
        dir_(dir),
        log_(log),
        start_us_(RealClock::Get()->NowMicros()) {}
  Controller& controller() override { return *controller_; }
  const JobConfig& config() const override { return *config_; }
  const RunDirectory& run_dir() const override { return *dir_; }
  void SetTotalIterations(int64_t total) override { total_ = total; }

  absl::Status EndIteration(const IterationRecord& rec) override {
    double elapsed = static_cast<double>(RealClock::Get()->NowMicros() - start_us_) * 1e-6;
    nlohmann::json j;
    j["step"] = rec.step;
    j["metrics"] = rec.metrics;
    j["timings"] = rec.timings;
    j["timings"]["elapsed_s"] = elapsed;
    RETURN_IF_ERROR(log_->Append(j));
    int64_t total = total_ > 0 ? total_ : config_->job.iterations;
    double eta = rec.step > 0 ? elapsed / static_cast<double>(rec.step) *
                                    static_cast<double>(total - rec.step)
                              : 0;
    std::string line = absl::StrFormat("[%s] iter %d/%d  %.1fs  eta %.1fs", config_->job.algorithm,
                                       rec.step, total, elapsed, eta);
    for (const auto& [k, v] : rec.metrics) absl::StrAppendFormat(&line, "  %s=%.4g", k, v);
    for (const auto& [k, v] : rec.timings) absl::StrAppendFormat(&line, "  %s=%.4g", k, v);
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    return absl::OkStatus();
  }

 private:
  Controller* controller_;
  const JobConfig* config_;
  const RunDirectory* dir_;
  MetricsLog* log_;
  int64_t start_us_;
  int64_t total_ = 0;
};

std::string NewJobId(const std::string& name) {
  std::random_device rd;
  return absl::StrFormat("%s-%08x", name, rd());
}

void SetUpControllerLog(const RunDirectory& dir, const std::string& level) {
  auto console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  auto file = std::make_shared<spdlog::sinks::basic_file_sink_mt>(dir.LogPath("controller"));
  auto logger =
      std::make_shared<spdlog::logger>("controller", spdlog::sinks_init_list{console, file});
  logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %n %^%l%$ %v");
  logger->set_level(spdlog::level::from_str(level));
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

void WriteStatus(const RunDirectory& dir, const std::string& state, const std::string& message) {
  nlohmann::json j{{"state", state}, {"message", message}, {"pid", getpid()}};
  dir.WriteFile("status.json", j.dump(2) + "\n").IgnoreError();
}

// Where local children connect: a wildcard bind is reached over loopback.
std::string LocalConnectAddress(const std::string& endpoint) {
  const std::string wildcard = "tcp://0.0.0.0:";
  if (endpoint.rfind(wildcard, 0) == 0)
    return "tcp://127.0.0.1:" + endpoint.substr(wildcard.size());
  return endpoint;
}

int ExitCodeFor(const absl::Status& s, const std::atomic<int>* stop) {
  if (s.ok()) return 0;
  if (s.code() == absl::StatusCode::kCancelled && stop != nullptr && stop->load() != 0) {
    return 128 + stop->load();
  }
  return 1;
}

}  // namespace

int RunJob(const JobConfig& config, const RunOptions& options) {
  auto dir = RunDirectory::Create(config.job.run_root, config.job.name);
  if (!dir.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(dir.status().message()).c_str());
    return 1;
  }
  SetUpControllerLog(*dir, config.job.log_level);
  spdlog::info("run directory {}", dir->path());
  absl::Status written = dir->WriteFile("config.resolved.yaml", ResolvedYaml(config));
  auto metrics = MetricsLog::Open(dir->path() + "/metrics.jsonl");
  auto algorithm = CreateAlgorithm(config);
  for (const absl::Status& s : {written, metrics.status(), algorithm.status()}) {
    if (!s.ok()) {
      spdlog::error("{}", Msg(s));
      WriteStatus(*dir, "failed", std::string(s.message()));
      return 1;
    }
  }

  zmq::context_t ctx;
  ZmqOptions zo;
  zo.limits.max_message_bytes = static_cast<size_t>(config.controller.max_message_mb) << 20;
  auto transport = ZmqServerTransport::Bind(
      ctx, absl::StrCat("tcp://", config.controller.host, ":", config.controller.port), zo);
  if (!transport.ok()) {
    spdlog::error("controller.host/controller.port: {}", Msg(transport.status()));
    WriteStatus(*dir, "failed", std::string(transport.status().message()));
    return 1;
  }
  spdlog::info("controller listening on {}", (*transport)->endpoint());

  Controller::Options co;
  co.job_id = NewJobId(dir->name());
  co.config_yaml = ResolvedYaml(config);
  co.run_dir = dir->path();
  co.heartbeat_interval_ms = config.controller.heartbeat_interval_ms;
  co.heartbeat_misses = config.controller.heartbeat_misses;
  co.register_timeout_s = config.controller.register_timeout_s;
  co.request_timeout_s = config.controller.request_timeout_s;
  co.shutdown_grace_s = config.controller.shutdown_grace_s;
  LocalProcessLauncher launcher;
  Controller controller(co, transport->get(), RealClock::Get(), &launcher, options.stop);
  for (const RoleRequirement& r : (*algorithm)->Roles()) {
    controller.ExpectRole(r.role, r.count, r.external);
  }
  WriteStatus(*dir, "starting", "");
  std::string connect = LocalConnectAddress((*transport)->endpoint());
  absl::Status status = controller.LaunchAll([&](const ActorInfo& a) {
    ProcessSpec spec;
    spec.name = a.id;
    spec.argv = {
        options.self_exe,       "actor",     "--role", a.role,        "--rank",
        std::to_string(a.rank), "--connect", connect,  "--log-level", config.job.log_level};
    spec.log_path = dir->LogPath(a.id);
    // libgomp reads this before main(): idle OpenMP threads must not spin
    // against OpenBLAS's own threads (measured: 40% of a 2-core machine).
    if (std::getenv("OMP_WAIT_POLICY") == nullptr) spec.env["OMP_WAIT_POLICY"] = "PASSIVE";
    return spec;
  });
  if (status.ok()) status = controller.WaitForActors();
  if (status.ok()) {
    WriteStatus(*dir, "running", "");
    spdlog::info("all {} actors registered; running {}", controller.actors().All().size(),
                 config.job.algorithm);
    Context job_ctx(&controller, &config, &*dir, &*metrics);
    status = (*algorithm)->Run(job_ctx);
  }
  controller.Shutdown(status.ok() ? "job finished" : std::string(status.message()));
  int code = ExitCodeFor(status, options.stop);
  if (status.ok()) {
    spdlog::info("job finished; results in {}", dir->path());
    WriteStatus(*dir, "finished", "");
  } else if (code > 128) {
    spdlog::warn("job stopped: {}; results so far in {}", Msg(status), dir->path());
    WriteStatus(*dir, "interrupted", std::string(status.message()));
  } else {
    spdlog::error("job failed: {}", Msg(status));
    spdlog::error("run directory: {}", dir->path());
    WriteStatus(*dir, "failed", std::string(status.message()));
  }
  if (controller.drops().total() > 0) {
    spdlog::warn("the controller dropped {} bad message(s) during the run",
                 controller.drops().total());
  }
  return code;
}

}  // namespace rlforge
