// ZeroMQ transports: ROUTER for the controller, DEALER for actors.
//
// Sockets are bounded: ZMQ_MAXMSGSIZE stops a peer from making us buffer more
// than the message limit per frame (ZeroMQ disconnects it), high-water marks
// bound the queues, and sends time out instead of blocking forever.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "proto/transport.h"
#include "zmq.hpp"

namespace rlforge {

struct ZmqOptions {
  WireLimits limits;
  int send_timeout_ms = 30'000;
  int linger_ms = 1'000;
  int high_water_mark = 1'000;
};

class ZmqServerTransport final : public ServerTransport {
 public:
  // Binds `address` ("tcp://127.0.0.1:0" picks a free port).
  static absl::StatusOr<std::unique_ptr<ZmqServerTransport>> Bind(zmq::context_t& ctx,
                                                                  const std::string& address,
                                                                  const ZmqOptions& options);
  absl::Status Send(const std::string& peer, Message msg) override;
  std::optional<Received> Receive(int timeout_ms) override;
  std::string endpoint() const override { return endpoint_; }

 private:
  ZmqServerTransport(zmq::socket_t socket, std::string endpoint, ZmqOptions options);
  zmq::socket_t socket_;
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
  std::optional<absl::StatusOr<Message>> Receive(int timeout_ms) override;

 private:
  ZmqClientTransport(zmq::socket_t socket, ZmqOptions options);
  zmq::socket_t socket_;
  ZmqOptions options_;
  uint64_t seq_ = 0;
  int receive_timeout_ms_ = -2;  // ZMQ_RCVTIMEO as last set
};

// "tcp://*:0" style wildcard checks and port parsing live with the callers;
// this only normalises "tcp://host:0" to ZeroMQ's "tcp://host:*".
std::string ZmqBindAddress(const std::string& address);

}  // namespace rlforge
