#include "proto/zmq_curve.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "common/logging.h"
#include "common/status.h"
#include "zmq_addon.hpp"

namespace rlforge {

namespace {

constexpr char kZapEndpoint[] = "inproc://zeromq.zap.01";
constexpr char kZapDomain[] = "rlforge";

// A fresh inproc address for the monitor of `socket`.
std::string MonitorAddress(const zmq::socket_t& socket) {
  return absl::StrFormat("inproc://rlforge-monitor-%p", static_cast<const void*>(&socket));
}

absl::StatusOr<zmq::socket_t> OpenMonitor(zmq::context_t& ctx, zmq::socket_t& socket, int events) {
  const std::string address = MonitorAddress(socket);
  if (zmq_socket_monitor(socket.handle(), address.c_str(), events) != 0) {
    return absl::InternalError(
        absl::StrCat("zmq_socket_monitor(", address, "): ", zmq_strerror(zmq_errno())));
  }
  zmq::socket_t monitor(ctx, zmq::socket_type::pair);
  monitor.set(zmq::sockopt::linger, 0);
  monitor.connect(address);
  return monitor;
}

struct MonitorEvent {
  uint16_t event = 0;
  uint32_t value = 0;
};

// One event from a monitor socket, if one is queued.
std::optional<MonitorEvent> NextEvent(zmq::socket_t& monitor) {
  std::vector<zmq::message_t> frames;
  try {
    if (!zmq::recv_multipart(monitor, std::back_inserter(frames), zmq::recv_flags::dontwait)) {
      return std::nullopt;
    }
  } catch (const zmq::error_t&) {
    return std::nullopt;
  }
  MonitorEvent e;
  if (frames.empty() || frames[0].size() < 6) return e;
  std::memcpy(&e.event, frames[0].data(), sizeof e.event);
  std::memcpy(&e.value, static_cast<const char*>(frames[0].data()) + 2, sizeof e.value);
  return e;
}

std::string PeerAddress(int fd) {
  sockaddr_storage sa{};
  socklen_t len = sizeof sa;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) return "";
  char host[INET6_ADDRSTRLEN] = {};
  int port = 0;
  if (sa.ss_family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&sa);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    port = ntohs(in->sin_port);
  } else if (sa.ss_family == AF_INET6) {
    auto* in = reinterpret_cast<sockaddr_in6*>(&sa);
    inet_ntop(AF_INET6, &in->sin6_addr, host, sizeof host);
    port = ntohs(in->sin6_port);
  } else {
    return "";
  }
  return absl::StrCat(host, ":", port);
}

std::string Z85(const std::string& raw) {
  if (raw.size() != 32) return absl::StrCat("(", raw.size(), "-byte key)");
  char out[41] = {};
  zmq_z85_encode(out, reinterpret_cast<const uint8_t*>(raw.data()), raw.size());
  return out;
}

}  // namespace

bool LogRateLimiter::Allow(int64_t now_us, uint64_t* suppressed) {
  if (window_start_us_ < 0 || now_us - window_start_us_ >= window_us_) {
    window_start_us_ = now_us;
    used_ = 0;
  }
  if (used_ >= burst_) {
    ++suppressed_;
    return false;
  }
  ++used_;
  *suppressed = suppressed_;
  suppressed_ = 0;
  return true;
}

void MakeCurveServer(zmq::socket_t& socket, const CurveKeys& keys) {
  socket.set(zmq::sockopt::curve_server, 1);
  socket.set(zmq::sockopt::curve_secretkey, keys.controller_secret);
  socket.set(zmq::sockopt::zap_domain, kZapDomain);
}

void MakeCurveClient(zmq::socket_t& socket, const CurveKeys& keys) {
  socket.set(zmq::sockopt::curve_serverkey, keys.controller_public);
  socket.set(zmq::sockopt::curve_publickey, keys.actor_public);
  socket.set(zmq::sockopt::curve_secretkey, keys.actor_secret);
}

absl::StatusOr<std::unique_ptr<CurveGuard>> CurveGuard::Start(zmq::context_t& ctx,
                                                              zmq::socket_t& server,
                                                              const CurveKeys& keys,
                                                              const std::string& what) {
  zmq::socket_t zap(ctx, zmq::socket_type::rep);
  zap.set(zmq::sockopt::linger, 0);
  try {
    zap.bind(kZapEndpoint);
  } catch (const zmq::error_t& e) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": cannot start the CURVE authenticator (", e.what(),
                     "): one CURVE server per ZeroMQ context"));
  }
  ASSIGN_OR_RETURN(zmq::socket_t monitor, OpenMonitor(ctx, server,
                                                      ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED |
                                                          ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                                                          ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL));
  std::unique_ptr<CurveGuard> guard(
      new CurveGuard(std::move(zap), std::move(monitor), keys.actor_public, what));
  guard->thread_ = std::thread([g = guard.get()] { g->Loop(); });
  return guard;
}

CurveGuard::CurveGuard(zmq::socket_t zap, zmq::socket_t monitor, std::string actor_public,
                       std::string what)
    : zap_(std::move(zap)),
      monitor_(std::move(monitor)),
      actor_public_(std::move(actor_public)),
      what_(std::move(what)) {}

CurveGuard::~CurveGuard() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void CurveGuard::Loop() {
  zmq::pollitem_t items[] = {{zap_.handle(), 0, ZMQ_POLLIN, 0},
                             {monitor_.handle(), 0, ZMQ_POLLIN, 0}};
  while (!stop_) {
    try {
      zmq::poll(items, 2, std::chrono::milliseconds(100));
    } catch (const zmq::error_t&) {
      continue;  // EINTR
    }
    if (items[0].revents & ZMQ_POLLIN) AnswerZap();
    if (items[1].revents & ZMQ_POLLIN) ReadMonitor();
  }
}

// ZAP 1.0 (RFC 27): version, request id, domain, address, identity, mechanism, credentials.
void CurveGuard::AnswerZap() {
  std::vector<zmq::message_t> req;
  try {
    if (!zmq::recv_multipart(zap_, std::back_inserter(req), zmq::recv_flags::dontwait)) return;
  } catch (const zmq::error_t&) {
    return;
  }
  std::string request_id = req.size() > 1 ? req[1].to_string() : "";
  std::string address = req.size() > 3 ? req[3].to_string() : "";
  std::string mechanism = req.size() > 5 ? req[5].to_string() : "";
  std::string key = req.size() > 6 ? Z85(req[6].to_string()) : "";
  bool ok = mechanism == "CURVE" && key == actor_public_;
  if (!ok) {
    Refused(address, mechanism == "CURVE"
                         ? absl::StrCat("CURVE key ", key.substr(0, 8), "... is not this job's")
                         : absl::StrCat("mechanism ", mechanism));
  }
  std::vector<zmq::message_t> reply;
  reply.emplace_back(std::string("1.0"));
  reply.emplace_back(request_id);
  reply.emplace_back(std::string(ok ? "200" : "400"));
  reply.emplace_back(std::string(ok ? "OK" : "not this job's actor key"));
  reply.emplace_back(std::string(ok ? "actor" : ""));
  reply.emplace_back();
  try {
    zmq::send_multipart(zap_, reply);
  } catch (const zmq::error_t& e) {
    spdlog::warn("{}: ZAP reply not sent: {}", what_, e.what());
  }
}

// A mechanism failure is followed, on the same I/O thread, by its connection's disconnect,
// which names the fd whose peer address the accept recorded.
void CurveGuard::ReadMonitor() {
  while (auto e = NextEvent(monitor_)) {
    int fd = static_cast<int>(e->value);
    if (e->event == ZMQ_EVENT_ACCEPTED) {
      peers_[fd] = PeerAddress(fd);
    } else if (e->event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
      pending_failure_ =
          e->value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH
              ? "it does not speak CURVE (an actor without the job's CURVE keys?)"
              : absl::StrCat("CURVE handshake failed (ZMTP error 0x", absl::Hex(e->value),
                             "; a key for another controller?)");
    } else if (e->event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
      // The peer left mid-handshake: a client that found we speak CURVE and it does not (it
      // saw the mismatch first), or a scanner.
      pending_failure_ =
          "it closed the connection during the handshake (an actor without the job's CURVE "
          "keys?)";
    } else if (e->event == ZMQ_EVENT_DISCONNECTED) {
      auto it = peers_.find(fd);
      std::string peer = it == peers_.end() ? "" : it->second;
      if (it != peers_.end()) peers_.erase(it);
      if (!pending_failure_.empty()) Refused(peer, pending_failure_);
      pending_failure_.clear();
    }
  }
}

void CurveGuard::Refused(const std::string& peer, const std::string& why) {
  refused_.fetch_add(1);
  uint64_t held_back = 0;
  if (!log_limit_.Allow(RealClock::Get()->NowMicros(), &held_back)) return;
  spdlog::warn("{}: refused a connection from {}: {}{}", what_,
               peer.empty() ? "an unknown address" : peer, why,
               held_back == 0 ? "" : absl::StrCat(" (", held_back, " more refusals not logged)"));
}

absl::StatusOr<std::unique_ptr<HandshakeWatch>> HandshakeWatch::Start(
    zmq::context_t& ctx, zmq::socket_t& socket, const std::string& address,
    const std::string& keys_path) {
  ASSIGN_OR_RETURN(zmq::socket_t monitor, OpenMonitor(ctx, socket,
                                                      ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                                                          ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                                                          ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL));
  return std::unique_ptr<HandshakeWatch>(
      new HandshakeWatch(std::move(monitor), address, keys_path));
}

absl::Status HandshakeWatch::Check() {
  while (failure_.ok()) {
    auto e = NextEvent(monitor_);
    if (!e) break;
    failure_ = Failure(e->event, e->value);
  }
  return failure_;
}

absl::Status HandshakeWatch::Failure(uint16_t event, uint32_t value) {
  const std::string head = absl::StrCat("the controller at ", address_);
  const bool keyed = !keys_path_.empty();
  if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
    return absl::PermissionDeniedError(
        absl::StrCat(head, " refused our CURVE key (from ", keys_path_, ", ZAP status ", value,
                     "): pass the actor.key of this job, runs/NAME/keys/actor.key"));
  }
  if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL && !keyed) {
    return absl::PermissionDeniedError(
        absl::StrCat(head,
                     " refused the handshake: the job requires its CURVE keys (pass --keys "
                     "runs/NAME/keys/actor.key or set ",
                     kKeysEnv, ")"));
  }
  if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL &&
      value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) {
    return absl::PermissionDeniedError(absl::StrCat(
        head, " does not use CURVE, but this actor was given keys (", keys_path_,
        "): a controller on loopback with controller.security auto, or security none? run "
        "without --keys and ",
        kKeysEnv));
  }
  // A controller that cannot read our HELLO (it has another key) closes the connection; so
  // does one that saw first that we lack CURVE, or one that is going away: a repeat counts.
  if (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL && ++closed_in_handshake_ < 3) {
    return absl::OkStatus();
  }
  if (!keyed) {
    return absl::PermissionDeniedError(
        absl::StrCat(head,
                     " refused the handshake: the job requires its CURVE keys (pass --keys "
                     "runs/NAME/keys/actor.key or set ",
                     kKeysEnv, ") (it closed the connection ", closed_in_handshake_,
                     " times during the handshake; or is it not an rlforge controller?)"));
  }
  return absl::PermissionDeniedError(absl::StrCat(
      head, " closed the connection during the CURVE handshake: the controller key in ", keys_path_,
      " is not this controller's (the actor.key of another job?)"));
}

}  // namespace rlforge
