#include "config/dashboard_config.h"

#include "absl/strings/str_cat.h"

namespace rlforge {

using config::CheckContext;
using config::SchemaBuilder;

void AddDashboardSection(SchemaBuilder<JobConfig>& b) {
  SchemaBuilder<DashboardOptions> d(
      "The controller's dashboard: a browser page, a JSON API and Prometheus /metrics, served "
      "read-only while the run goes; and TensorBoard event files in the run directory. See "
      "docs/dashboard.md.");
  d.Bool("enabled", &DashboardOptions::enabled, "Serve the dashboard over HTTP.");
  d.String("host", &DashboardOptions::host,
           "Address the dashboard binds. Anything but loopback needs a token.");
  d.Int("port", &DashboardOptions::port, "TCP port; 0 picks a free one (printed at start).")
      .Min(0)
      .Max(65535);
  d.String("token", &DashboardOptions::token,
           "Access token: requests must send `Authorization: Bearer TOKEN` or `?token=TOKEN`. "
           "Empty: the environment's RLFORGE_DASHBOARD_TOKEN, else none (loopback only). "
           "Prefer the environment variable: this key is copied into config.resolved.yaml.");
  d.Double("linger_s", &DashboardOptions::linger_s,
           "Keep serving this long after the run ends (Ctrl-C ends it sooner).")
      .Min(0);
  d.Int("max_points", &DashboardOptions::max_points,
        "Iterations the dashboard keeps in memory (the latest); metrics.jsonl keeps all.")
      .Min(1)
      .Max(10000000);
  d.Int("max_samples", &DashboardOptions::max_samples,
        "Recent samples (prompt, response, reward) kept for /api/samples.")
      .Min(0)
      .Max(100000);
  d.Bool("tensorboard", &DashboardOptions::tensorboard,
         "Write TensorBoard event files (events.out.tfevents.*) into the run directory.");
  d.Check([](const DashboardOptions& o, CheckContext& ctx) {
    if (o.enabled && !o.token.empty() && o.token.find_first_of(" \t\r\n") != std::string::npos) {
      ctx.Error("token", "must not contain whitespace");
    }
  });
  b.Section("dashboard", &JobConfig::dashboard, d.Build());
}

absl::StatusOr<std::string> ResolveDashboardToken(const DashboardOptions& options,
                                                  const char* env_token) {
  std::string token = options.token;
  if (token.empty() && env_token != nullptr) token = env_token;
  if (options.enabled && token.empty() && !IsLoopbackHost(options.host)) {
    return absl::InvalidArgumentError(
        absl::StrCat("dashboard.host: '", options.host,
                     "' is not a loopback address, so the dashboard needs a token: set "
                     "dashboard.token or the environment variable RLFORGE_DASHBOARD_TOKEN "
                     "(or bind dashboard.host: 127.0.0.1)"));
  }
  return token;
}

}  // namespace rlforge
