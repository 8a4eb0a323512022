#include "proto/zmq_transport.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "proto/zmq_curve.h"
#include "proto/zmq_monitor.h"
#include "zmq_addon.hpp"

namespace rlforge {

namespace {

void ApplyCommonOptions(zmq::socket_t& s, const ZmqOptions& o) {
  s.set(zmq::sockopt::linger, o.linger_ms);
  s.set(zmq::sockopt::sndtimeo, o.send_timeout_ms);
  s.set(zmq::sockopt::sndhwm, o.high_water_mark);
  s.set(zmq::sockopt::rcvhwm, o.high_water_mark);
  // Per-frame cap enforced by ZeroMQ itself before it buffers the frame.
  s.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(o.limits.max_message_bytes));
}

// Receives one multipart message if one arrives within timeout_ms.
// Blocks in recv under ZMQ_RCVTIMEO (set only when the timeout changes): the
// same path as a bare blocking recv, with no extra poll per message. A signal
// (EINTR) or any other socket error reads as "nothing arrived"; the caller's
// loop checks its stop flag and carries on.
std::optional<std::vector<zmq::message_t>> ReceiveFrames(zmq::socket_t& s, int timeout_ms,
                                                         int* current_timeout_ms) {
  try {
    if (*current_timeout_ms != timeout_ms) {
      s.set(zmq::sockopt::rcvtimeo, timeout_ms);
      *current_timeout_ms = timeout_ms;
    }
    std::vector<zmq::message_t> frames;
    auto n = zmq::recv_multipart(s, std::back_inserter(frames));
    if (!n) return std::nullopt;
    return frames;
  } catch (const zmq::error_t&) {
    return std::nullopt;
  }
}

absl::Status SendFrames(zmq::socket_t& s, std::vector<zmq::message_t>& frames,
                        const std::string& where) {
  try {
    for (size_t i = 0; i < frames.size(); ++i) {
      auto flags = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
      // A signal may interrupt a blocking send; retry the same frame.
      for (int attempt = 0;; ++attempt) {
        try {
          if (!s.send(frames[i], flags)) {
            return absl::DeadlineExceededError(absl::StrCat("send to ", where, " timed out"));
          }
          break;
        } catch (const zmq::error_t& e) {
          if (e.num() != EINTR || attempt > 100) throw;
        }
      }
    }
  } catch (const zmq::error_t& e) {
    return absl::UnavailableError(absl::StrCat("send to ", where, " failed: ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace

std::string ZmqBindAddress(const std::string& address) {
  if (absl::EndsWith(address, ":0")) return address.substr(0, address.size() - 2) + ":*";
  return address;
}

ZmqServerTransport::ZmqServerTransport(zmq::socket_t socket, std::unique_ptr<CurveGuard> guard,
                                       std::string endpoint, ZmqOptions options)
    : socket_(std::move(socket)),
      guard_(std::move(guard)),
      endpoint_(std::move(endpoint)),
      options_(options) {}

ZmqServerTransport::~ZmqServerTransport() = default;

uint64_t ZmqServerTransport::refused_handshakes() const {
  return guard_ == nullptr ? 0 : guard_->refused();
}

absl::StatusOr<std::unique_ptr<ZmqServerTransport>> ZmqServerTransport::Bind(
    zmq::context_t& ctx, const std::string& address, const ZmqOptions& options) {
  zmq::socket_t s(ctx, zmq::socket_type::router);
  ApplyCommonOptions(s, options);
  // Fail loudly when a peer is unknown instead of dropping silently.
  s.set(zmq::sockopt::router_mandatory, 1);
  std::unique_ptr<CurveGuard> guard;
  if (options.curve.has_value()) {
    // The authenticator runs before the bind: no connection is ever admitted unchecked.
    MakeCurveServer(s, *options.curve);
    ASSIGN_OR_RETURN(guard, CurveGuard::Start(ctx, s, *options.curve, "controller socket"));
  }
  try {
    s.bind(ZmqBindAddress(address));
  } catch (const zmq::error_t& e) {
    return absl::UnavailableError(absl::StrCat("cannot bind ", address, ": ", e.what()));
  }
  std::string endpoint = s.get(zmq::sockopt::last_endpoint);
  return std::unique_ptr<ZmqServerTransport>(
      new ZmqServerTransport(std::move(s), std::move(guard), endpoint, options));
}

absl::Status ZmqServerTransport::Send(const std::string& peer, Message msg) {
  msg.envelope.set_seq(++seq_);
  std::vector<zmq::message_t> frames;
  frames.reserve(2 + msg.tensors.size());
  frames.emplace_back(peer.data(), peer.size());
  for (auto& f : Encode(std::move(msg))) frames.push_back(std::move(f));
  return SendFrames(socket_, frames, "peer");
}

std::optional<Received> ZmqServerTransport::Receive(int timeout_ms) {
  auto frames = ReceiveFrames(socket_, timeout_ms, &receive_timeout_ms_);
  if (!frames) return std::nullopt;
  Received r;
  r.peer = (*frames)[0].to_string();
  for (size_t i = 1; i < frames->size(); ++i) r.wire_bytes += (*frames)[i].size();
  frames->erase(frames->begin());
  r.message = Decode(std::move(*frames), options_.limits);
  return r;
}

ZmqClientTransport::ZmqClientTransport(zmq::socket_t socket, std::unique_ptr<HandshakeWatch> watch,
                                       std::unique_ptr<ConnectionWatch> link, ZmqOptions options)
    : socket_(std::move(socket)),
      watch_(std::move(watch)),
      link_(std::move(link)),
      options_(options) {}

ZmqClientTransport::~ZmqClientTransport() = default;

absl::StatusOr<std::unique_ptr<ZmqClientTransport>> ZmqClientTransport::Connect(
    zmq::context_t& ctx, const std::string& address, const ZmqOptions& options) {
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  ApplyCommonOptions(s, options);
  if (options.curve.has_value()) MakeCurveClient(s, *options.curve);
  std::unique_ptr<HandshakeWatch> watch;
  if (options.watch_handshake) {
    ASSIGN_OR_RETURN(
        watch, HandshakeWatch::Start(ctx, s, address, options.curve ? options.curve->path : ""));
  }
  std::unique_ptr<ConnectionWatch> link;
  if (options.watch_connection) {
    if (options.watch_handshake) {
      return absl::InvalidArgumentError("a socket has one monitor: watch its handshake or link");
    }
    ASSIGN_OR_RETURN(link, ConnectionWatch::Start(ctx, s));
  }
  try {
    s.connect(address);
  } catch (const zmq::error_t& e) {
    return absl::InvalidArgumentError(absl::StrCat("cannot connect to ", address, ": ", e.what()));
  }
  return std::unique_ptr<ZmqClientTransport>(
      new ZmqClientTransport(std::move(s), std::move(watch), std::move(link), options));
}

absl::Status ZmqClientTransport::HandshakeError() {
  return watch_ == nullptr ? absl::OkStatus() : watch_->Check();
}

int64_t ZmqClientTransport::LinkDownMicros(int64_t now_us) {
  return link_ == nullptr ? 0 : link_->DownForMicros(now_us);
}

absl::Status ZmqClientTransport::Send(Message msg) {
  msg.envelope.set_seq(++seq_);
  auto frames = Encode(std::move(msg));
  return SendFrames(socket_, frames, "controller");
}

absl::Status ZmqClientTransport::SendWithin(Message msg, int timeout_ms) {
  socket_.set(zmq::sockopt::sndtimeo, timeout_ms);
  absl::Status s = Send(std::move(msg));
  socket_.set(zmq::sockopt::sndtimeo, options_.send_timeout_ms);
  return s;
}

std::optional<absl::StatusOr<Message>> ZmqClientTransport::Receive(int timeout_ms) {
  auto frames = ReceiveFrames(socket_, timeout_ms, &receive_timeout_ms_);
  if (!frames) return std::nullopt;
  return Decode(std::move(*frames), options_.limits);
}

}  // namespace rlforge
