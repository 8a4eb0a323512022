// Schema of the `dashboard:` section (see dashboard_options.h) and the token rule.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "common/host_address.h"
#include "config/job_config.h"

namespace rlforge {

void AddDashboardSection(config::SchemaBuilder<JobConfig>& b);

// The token the dashboard requires: dashboard.token, else the environment's
// RLFORGE_DASHBOARD_TOKEN (`env_token`, may be null). Empty means none. Fails,
// naming the keys, when the dashboard binds off loopback without a token.
absl::StatusOr<std::string> ResolveDashboardToken(const DashboardOptions& options,
                                                  const char* env_token);

}  // namespace rlforge
