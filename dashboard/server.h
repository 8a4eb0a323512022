// DashboardServer: the run's read-only HTTP view, on its own threads.
//
// GET request -> token check -> RunState::Take (a copy) -> render -> response
//
//   /                 the dashboard page (embedded; no CDN, no build step)
//   /api/status       run state, progress, latest metrics, actor counts
//   /api/metrics?since=STEP   metrics.jsonl records after STEP
//   /api/actors       the actor table
//   /api/samples      recent samples (language jobs)
//   /api/config       the resolved config (secrets removed)
//   /metrics          Prometheus text exposition
//
// With a token, every request must carry `Authorization: Bearer TOKEN` or
// `?token=TOKEN`, else 401. Only GET is served. The server never touches the
// controller: it reads RunState, which the controller fills.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "dashboard/run_state.h"

namespace rlforge::dashboard {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: a free one
  std::string token;
  int threads = 8;
};

class DashboardServer {
 public:
  // Binds and starts serving. `state` is not owned and must outlive the server.
  static absl::StatusOr<std::unique_ptr<DashboardServer>> Start(const ServerOptions& options,
                                                                const RunState* state);
  // Stops accepting, finishes requests in flight, joins the threads.
  ~DashboardServer();

  int port() const;
  // http://HOST:PORT/ as a browser on this machine reaches it.
  std::string url() const;

 private:
  struct Impl;
  explicit DashboardServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Tells a request's token apart from the expected one (constant time in the length).
bool TokenMatches(const std::string& given, const std::string& expected);

struct HttpReply {
  int status = 0;
  std::string body;
};

// GET base_url + path (base_url like http://127.0.0.1:8080), with the token if non-empty.
absl::StatusOr<HttpReply> HttpGet(const std::string& base_url, const std::string& path,
                                  const std::string& token, double timeout_s = 5);

}  // namespace rlforge::dashboard
