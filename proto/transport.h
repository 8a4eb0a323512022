// Transports: how the controller and actors exchange Messages.
//
// ServerTransport is the controller's side (one socket, many peers, ROUTER);
// ClientTransport is an actor's side (one peer, DEALER). Both are interfaces so
// the controller's logic is tested over MemoryTransport, without sockets or
// sleeps. A transport is used from one thread at a time.
//
// Receive() hands back undecodable input as an error status together with the
// peer it came from; deciding what to do with it (log, drop, reject) is the
// caller's business, never the transport's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/wire.h"

namespace rlforge {

struct Received {
  std::string peer;  // opaque routing id of the sender
  absl::StatusOr<Message> message;
  size_t wire_bytes = 0;
};

class ServerTransport {
 public:
  virtual ~ServerTransport() = default;
  // Sets the envelope's seq and protocol version, then sends to `peer`.
  virtual absl::Status Send(const std::string& peer, Message msg) = 0;
  // Waits up to timeout_ms (0: poll) for one message.
  virtual std::optional<Received> Receive(int timeout_ms) = 0;
  // Address peers connect to, e.g. "tcp://127.0.0.1:40123".
  virtual std::string endpoint() const = 0;
  // Connections refused before any message (a client without the job's CURVE key).
  virtual uint64_t refused_handshakes() const { return 0; }
};

class ClientTransport {
 public:
  virtual ~ClientTransport() = default;
  virtual absl::Status Send(Message msg) = 0;
  virtual std::optional<absl::StatusOr<Message>> Receive(int timeout_ms) = 0;
};

}  // namespace rlforge
