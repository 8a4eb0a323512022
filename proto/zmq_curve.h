// CURVE on ZeroMQ sockets: the server's gatekeeper and the client's handshake watch.
//
// server: CurveGuard::Start (ZAP handler bound) -> socket binds as a CURVE server ->
//   each handshake: ZAP request -> accept only the job's actor key; refusals logged, counted
// client: socket with the job's keys -> HandshakeWatch::Check reads the socket's monitor ->
//   a refused handshake becomes an error that says what to do, not a silent timeout
//
// CurveGuard owns one thread that answers ZAP and reads the server socket's monitor; every
// other call is from the socket's owner. One CurveGuard per ZeroMQ context (ZAP's endpoint is
// per context). Refusals the ZAP handler sees (a wrong key) carry the peer's address; clients
// without CURVE fail earlier, at the mechanism check, and are read from the monitor.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "proto/curve_keys.h"
#include "zmq.hpp"

namespace rlforge {

// At most `burst` lines per `window_us`; the rest are counted and reported with the next line.
class LogRateLimiter {
 public:
  LogRateLimiter(int burst, int64_t window_us) : burst_(burst), window_us_(window_us) {}
  // True if a line may be written at `now_us`; *suppressed gets the lines held back since
  // the last allowed one (then reset).
  bool Allow(int64_t now_us, uint64_t* suppressed);

 private:
  int burst_;
  int64_t window_us_;
  int64_t window_start_us_ = -1;
  int used_ = 0;
  uint64_t suppressed_ = 0;
};

// Makes `socket` (not yet bound) a CURVE server with the controller's key pair.
void MakeCurveServer(zmq::socket_t& socket, const CurveKeys& keys);
// Makes `socket` (not yet connected) a CURVE client with the actor pair.
void MakeCurveClient(zmq::socket_t& socket, const CurveKeys& keys);

class CurveGuard {
 public:
  // Binds the context's ZAP handler, admitting only keys.actor_public, and watches `server`'s
  // handshakes. Call before `server` binds. `what` names the socket in log lines.
  static absl::StatusOr<std::unique_ptr<CurveGuard>> Start(zmq::context_t& ctx,
                                                           zmq::socket_t& server,
                                                           const CurveKeys& keys,
                                                           const std::string& what);
  ~CurveGuard();
  // Handshakes refused so far: wrong key (ZAP) or no/garbled CURVE (mechanism).
  uint64_t refused() const { return refused_.load(); }

 private:
  CurveGuard(zmq::socket_t zap, zmq::socket_t monitor, std::string actor_public, std::string what);
  void Loop();
  void AnswerZap();
  void ReadMonitor();
  void Refused(const std::string& peer, const std::string& why);

  zmq::socket_t zap_;
  zmq::socket_t monitor_;
  std::string actor_public_;
  std::string what_;
  std::atomic<uint64_t> refused_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
  LogRateLimiter log_limit_{5, 10'000'000};
  // Peer addresses of accepted connections by fd, and a mechanism failure waiting for its
  // connection's disconnect (the event that names the fd).
  std::map<int, std::string> peers_;
  std::string pending_failure_;
};

// A client socket's handshake, as its monitor reports it.
class HandshakeWatch {
 public:
  // Call before `socket` connects. `address` and `keys_path` (empty: no keys) are for messages.
  static absl::StatusOr<std::unique_ptr<HandshakeWatch>> Start(zmq::context_t& ctx,
                                                               zmq::socket_t& socket,
                                                               const std::string& address,
                                                               const std::string& keys_path);
  // Reads the events so far, without waiting: an error once the peer refused the handshake.
  absl::Status Check();

 private:
  HandshakeWatch(zmq::socket_t monitor, std::string address, std::string keys_path)
      : monitor_(std::move(monitor)), address_(std::move(address)), keys_path_(keys_path) {}
  absl::Status Failure(uint16_t event, uint32_t value);

  zmq::socket_t monitor_;
  std::string address_;
  std::string keys_path_;
  int closed_in_handshake_ = 0;
  absl::Status failure_;
};

}  // namespace rlforge
