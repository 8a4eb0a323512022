// ZeroMQ transports: ROUTER for the controller, DEALER for actors.
//
// Sockets are bounded: ZMQ_MAXMSGSIZE stops a peer from making us buffer more
// than the message limit per frame (ZeroMQ disconnects it), high-water marks
// bound the queues, and sends time out instead of blocking forever.
//
// With `curve` set (proto/curve_keys.h) the server is a CURVE server that admits only the
// job's actor key (proto/zmq_curve.h) and the client a CURVE client: the traffic is encrypted
// and every peer authenticated. Without it, plain TCP (loopback-only jobs).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "proto/curve_keys.h"
#include "proto/transport.h"
#include "zmq.hpp"

namespace rlforge {

struct ZmqOptions {
  WireLimits limits;
  int send_timeout_ms = 30'000;
  int linger_ms = 1'000;
  int high_water_mark = 1'000;
  // The job's keys: controller.key for a server, actor.key for a client. None: plaintext.
  std::optional<CurveKeys> curve;
  // Client only: watch the handshake so that a refusal is an error (HandshakeError), not a
  // silent wait.
  bool watch_handshake = false;
  // Client only: watch the link (ConnectionWatch), for LinkDownMicros. A socket has one
  // monitor, so not with watch_handshake.
  bool watch_connection = false;
};

class CurveGuard;
class HandshakeWatch;
class ConnectionWatch;

class ZmqServerTransport final : public ServerTransport {
 public:
  // Binds `address` ("tcp://127.0.0.1:0" picks a free port).
  static absl::StatusOr<std::unique_ptr<ZmqServerTransport>> Bind(zmq::context_t& ctx,
                                                                  const std::string& address,
                                                                  const ZmqOptions& options);
  absl::Status Send(const std::string& peer, Message msg) override;
  std::optional<Received> Receive(int timeout_ms) override;
  std::string endpoint() const override { return endpoint_; }
  uint64_t refused_handshakes() const override;
  ~ZmqServerTransport() override;

 private:
  ZmqServerTransport(zmq::socket_t socket, std::unique_ptr<CurveGuard> guard, std::string endpoint,
                     ZmqOptions options);
  zmq::socket_t socket_;
  std::unique_ptr<CurveGuard> guard_;  // CURVE only; watches socket_, so declared after it
  std::string endpoint_;
  ZmqOptions options_;
  uint64_t seq_ = 0;
  int receive_timeout_ms_ = -2;  // ZMQ_RCVTIMEO as last set
};

class ZmqClientTransport final : public ClientTransport {
 public:
  static absl::StatusOr<std::unique_ptr<ZmqClientTransport>> Connect(zmq::context_t& ctx,
                                                                     const std::string& address,
                                                                     const ZmqOptions& options);
  absl::Status Send(Message msg) override;
  // Send, timing out after timeout_ms instead of ZmqOptions::send_timeout_ms.
  absl::Status SendWithin(Message msg, int timeout_ms);
  std::optional<absl::StatusOr<Message>> Receive(int timeout_ms) override;
  // With watch_handshake: an error once the controller refused our handshake (no keys, wrong
  // keys), saying what to pass. OK while none was refused (or nothing is watched).
  absl::Status HandshakeError();
  // With watch_connection: how long the link to the server has been down after being up
  // (0 while up). A server process that exits closes it at once.
  int64_t LinkDownMicros(int64_t now_us);
  ~ZmqClientTransport() override;

 private:
  ZmqClientTransport(zmq::socket_t socket, std::unique_ptr<HandshakeWatch> watch,
                     std::unique_ptr<ConnectionWatch> link, ZmqOptions options);
  zmq::socket_t socket_;
  std::unique_ptr<HandshakeWatch> watch_;
  std::unique_ptr<ConnectionWatch> link_;
  ZmqOptions options_;
  uint64_t seq_ = 0;
  int receive_timeout_ms_ = -2;  // ZMQ_RCVTIMEO as last set
};

// "tcp://*:0" style wildcard checks and port parsing live with the callers;
// this only normalises "tcp://host:0" to ZeroMQ's "tcp://host:*".
std::string ZmqBindAddress(const std::string& address);

}  // namespace rlforge
