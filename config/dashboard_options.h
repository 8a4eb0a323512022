// The `dashboard:` section: the controller's read-only HTTP view of a run
// (browser page, JSON API, Prometheus /metrics) and its TensorBoard files.
#pragma once

#include <cstdint>
#include <string>

namespace rlforge {

struct DashboardOptions {
  bool enabled = true;
  std::string host = "127.0.0.1";
  int64_t port = 0;
  std::string token;  // also RLFORGE_DASHBOARD_TOKEN; required off loopback
  double linger_s = 0;
  int64_t max_points = 10000;
  int64_t max_samples = 64;
  bool tensorboard = true;
};

}  // namespace rlforge
