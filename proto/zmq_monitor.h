// ZeroMQ socket monitors: what happens to a socket's connections (zmq_socket_monitor).
//
// OpenMonitor(socket, events) -> a PAIR socket that receives them -> NextEvent, never blocking.
// ConnectionWatch keeps one client socket's link state: down from the moment it disconnects or
// a connect attempt is refused until the next handshake (a controller that exited closes the
// TCP connection, and its port refuses the retries, at once; one on a host that vanished does
// neither, and only silence tells).
//
// A socket has one monitor: a second zmq_socket_monitor replaces the first.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "zmq.hpp"

namespace rlforge {

absl::StatusOr<zmq::socket_t> OpenMonitor(zmq::context_t& ctx, zmq::socket_t& socket, int events);

struct MonitorEvent {
  uint16_t event = 0;
  uint32_t value = 0;
};

// One event from a monitor socket, if one is queued.
std::optional<MonitorEvent> NextEvent(zmq::socket_t& monitor);

class ConnectionWatch {
 public:
  // Call before `socket` connects.
  static absl::StatusOr<std::unique_ptr<ConnectionWatch>> Start(zmq::context_t& ctx,
                                                                zmq::socket_t& socket);
  // Reads the events so far: how long (at `now_us`) the link has been down; 0 while up or
  // still connecting.
  int64_t DownForMicros(int64_t now_us);

 private:
  explicit ConnectionWatch(zmq::socket_t monitor) : monitor_(std::move(monitor)) {}
  zmq::socket_t monitor_;
  int64_t down_since_us_ = 0;  // 0: not down
};

}  // namespace rlforge
