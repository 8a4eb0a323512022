// In-memory ServerTransport for tests: the test injects what peers "send" and
// inspects what the server sent. Frames still go through Encode/Decode, so the
// wire checks are exercised; nothing touches a socket or sleeps.
#pragma once

#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "proto/transport.h"

namespace rlforge {

class MemoryServerTransport final : public ServerTransport {
 public:
  explicit MemoryServerTransport(WireLimits limits = {}) : limits_(limits) {}

  absl::Status Send(const std::string& peer, Message msg) override;
  // Never waits: returns the next injected message or nullopt.
  std::optional<Received> Receive(int timeout_ms) override;
  std::string endpoint() const override { return "memory://server"; }

  // What a peer sends: a well-formed message, or raw frames (for fuzzing).
  void Inject(const std::string& peer, Message msg);
  void InjectFrames(const std::string& peer, std::vector<zmq::message_t> frames);
  // Everything sent since the last call, decoded.
  std::vector<std::pair<std::string, Message>> TakeSent();
  // Makes Send to `peer` fail, as ZeroMQ does for a vanished peer.
  void Disconnect(const std::string& peer) { unreachable_.push_back(peer); }

 private:
  WireLimits limits_;
  uint64_t seq_ = 0;
  std::deque<std::pair<std::string, std::vector<zmq::message_t>>> inbox_;
  std::vector<std::pair<std::string, Message>> sent_;
  std::vector<std::string> unreachable_;
};

}  // namespace rlforge
