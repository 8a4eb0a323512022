#include "proto/zmq_monitor.h"

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "zmq_addon.hpp"

namespace rlforge {

namespace {

// A fresh inproc address for the monitor of `socket`.
std::string MonitorAddress(const zmq::socket_t& socket) {
  return absl::StrFormat("inproc://rlforge-monitor-%p", static_cast<const void*>(&socket));
}

}  // namespace

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

absl::StatusOr<std::unique_ptr<ConnectionWatch>> ConnectionWatch::Start(zmq::context_t& ctx,
                                                                        zmq::socket_t& socket) {
  auto monitor = OpenMonitor(
      ctx, socket,
      ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CONNECT_RETRIED);
  if (!monitor.ok()) return monitor.status();
  return std::unique_ptr<ConnectionWatch>(new ConnectionWatch(*std::move(monitor)));
}

int64_t ConnectionWatch::DownForMicros(int64_t now_us) {
  while (auto e = NextEvent(monitor_)) {
    if (e->event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
      down_since_us_ = 0;
    } else if (down_since_us_ == 0) {  // it closed, or a connect attempt was refused
      down_since_us_ = now_us;
    }
  }
  return down_since_us_ == 0 ? 0 : now_us - down_since_us_;
}

}  // namespace rlforge
