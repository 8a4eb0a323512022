#include "proto/memory_transport.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace rlforge {

absl::Status MemoryServerTransport::Send(const std::string& peer, Message msg) {
  if (std::find(unreachable_.begin(), unreachable_.end(), peer) != unreachable_.end()) {
    return absl::UnavailableError(absl::StrCat("peer ", peer, " is unreachable"));
  }
  msg.envelope.set_seq(++seq_);
  auto decoded = Decode(Encode(std::move(msg)), limits_);
  if (!decoded.ok()) return decoded.status();
  sent_.emplace_back(peer, std::move(decoded).value());
  return absl::OkStatus();
}

std::optional<Received> MemoryServerTransport::Receive(int /*timeout_ms*/) {
  if (inbox_.empty()) return std::nullopt;
  auto [peer, frames] = std::move(inbox_.front());
  inbox_.pop_front();
  Received r;
  r.peer = peer;
  for (const auto& f : frames) r.wire_bytes += f.size();
  r.message = Decode(std::move(frames), limits_);
  return r;
}

void MemoryServerTransport::Inject(const std::string& peer, Message msg) {
  inbox_.emplace_back(peer, Encode(std::move(msg)));
}

void MemoryServerTransport::InjectFrames(const std::string& peer,
                                         std::vector<zmq::message_t> frames) {
  inbox_.emplace_back(peer, std::move(frames));
}

std::vector<std::pair<std::string, Message>> MemoryServerTransport::TakeSent() {
  return std::exchange(sent_, {});
}

}  // namespace rlforge
