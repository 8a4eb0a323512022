#include "dashboard/server.h"

#include <httplib.h>

#include <chrono>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "dashboard/dashboard_page.h"
#include "dashboard/render.h"

namespace rlforge::dashboard {

struct DashboardServer::Impl {
  ServerOptions options;
  const RunState* state = nullptr;
  httplib::Server server;
  int port = 0;
  std::thread thread;
};

namespace {

bool Authorized(const httplib::Request& req, const std::string& token) {
  if (token.empty()) return true;
  const std::string bearer = "Bearer ";
  std::string auth = req.get_header_value("Authorization");
  if (absl::StartsWith(auth, bearer) && TokenMatches(auth.substr(bearer.size()), token)) {
    return true;
  }
  return req.has_param("token") && TokenMatches(req.get_param_value("token"), token);
}

void Json(httplib::Response& res, const nlohmann::json& j) {
  res.set_header("Cache-Control", "no-store");
  res.set_content(j.dump(), "application/json");
}

void AddRoutes(httplib::Server& s, const RunState* state) {
  s.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_header("Cache-Control", "no-store");
    res.set_content(kDashboardPage, "text/html; charset=utf-8");
  });
  s.Get("/api/status", [state](const httplib::Request&, httplib::Response& res) {
    Json(res, StatusJson(state->Take(-1, 1)));
  });
  s.Get("/api/metrics", [state](const httplib::Request& req, httplib::Response& res) {
    int64_t since = -1;
    if (req.has_param("since") && !absl::SimpleAtoi(req.get_param_value("since"), &since)) {
      res.status = 400;
      res.set_content("since: expected an integer step\n", "text/plain");
      return;
    }
    Json(res, MetricsJson(state->Take(since)));
  });
  s.Get("/api/actors", [state](const httplib::Request&, httplib::Response& res) {
    Json(res, ActorsJson(state->Take(-1, 0)));
  });
  s.Get("/api/samples", [state](const httplib::Request&, httplib::Response& res) {
    Json(res, SamplesJson(state->Take(-1, 0)));
  });
  s.Get("/api/config", [state](const httplib::Request&, httplib::Response& res) {
    Json(res, ConfigJson(state->Take(-1, 0)));
  });
  s.Get("/metrics", [state](const httplib::Request&, httplib::Response& res) {
    res.set_content(PrometheusText(state->Take(-1, 1)), "text/plain; version=0.0.4");
  });
}

}  // namespace

bool TokenMatches(const std::string& given, const std::string& expected) {
  if (given.size() != expected.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < given.size(); ++i) {
    diff |= static_cast<unsigned char>(given[i] ^ expected[i]);
  }
  return diff == 0;
}

absl::StatusOr<std::unique_ptr<DashboardServer>> DashboardServer::Start(
    const ServerOptions& options, const RunState* state) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->state = state;
  int threads = std::max(1, options.threads);
  impl->server.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  std::string token = options.token;
  impl->server.set_pre_routing_handler(
      [token](const httplib::Request& req, httplib::Response& res) {
        if (Authorized(req, token)) return httplib::Server::HandlerResponse::Unhandled;
        res.status = 401;
        res.set_header("WWW-Authenticate", "Bearer");
        res.set_content(
            "401 unauthorized: this dashboard needs its token (dashboard.token or "
            "RLFORGE_DASHBOARD_TOKEN): send `Authorization: Bearer TOKEN` or add ?token=TOKEN\n",
            "text/plain");
        return httplib::Server::HandlerResponse::Handled;
      });
  // httplib's default adds SO_REUSEPORT, which would let a second run share a
  // fixed port silently; keep SO_REUSEADDR only, so a taken port is an error.
  impl->server.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  AddRoutes(impl->server, state);
  if (options.port == 0) {
    impl->port = impl->server.bind_to_any_port(options.host);
  } else {
    impl->port = impl->server.bind_to_port(options.host, options.port) ? options.port : -1;
  }
  if (impl->port < 0) {
    return absl::UnavailableError(absl::StrCat("dashboard.host/dashboard.port: cannot bind ",
                                               options.host, ":", options.port,
                                               " (in use, or not an address of this host)"));
  }
  // Idle keep-alive connections hold a pool thread each: let them go quickly.
  impl->server.set_keep_alive_timeout(2);
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->server.listen_after_bind(); });
  // stop() before the loop runs would be lost and the join would hang: wait for it.
  for (int i = 0; i < 2000 && !impl->server.is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return std::unique_ptr<DashboardServer>(new DashboardServer(std::move(impl)));
}

DashboardServer::DashboardServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

DashboardServer::~DashboardServer() {
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

int DashboardServer::port() const { return impl_->port; }

std::string DashboardServer::url() const {
  std::string host = impl_->options.host;
  if (host == "0.0.0.0" || host == "::" || host.empty()) host = "127.0.0.1";
  if (host.find(':') != std::string::npos) host = absl::StrCat("[", host, "]");
  return absl::StrCat("http://", host, ":", impl_->port, "/");
}

absl::StatusOr<HttpReply> HttpGet(const std::string& base_url, const std::string& path,
                                  const std::string& token, double timeout_s) {
  std::string base = base_url;
  while (absl::EndsWith(base, "/")) base.pop_back();
  httplib::Client client(base);
  if (!client.is_valid()) return absl::InvalidArgumentError(absl::StrCat("bad URL ", base_url));
  auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  client.set_connection_timeout(timeout);
  client.set_read_timeout(timeout);
  httplib::Headers headers;
  if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
  auto res = client.Get(path.c_str(), headers);
  if (!res) {
    return absl::UnavailableError(
        absl::StrCat("GET ", base, path, ": ", httplib::to_string(res.error())));
  }
  return HttpReply{res->status, res->body};
}

}  // namespace rlforge::dashboard
