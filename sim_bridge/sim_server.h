// SimServer: serves one LocalVectorEnv over sim_bridge (docs/sim_bridge.md).
//
// ROUTER socket (or shm channel) -> DecodeRequest -> spec | reset | step on the vector env ->
// EncodeReply -> same peer
//
// Bad requests get a SimError reply and the server keeps serving; an env
// failure (NaN, bad action) is a SimError naming the env index. Used by
// `rlforge sim-server` and by tests in-process. One thread serves.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "proto/wire.h"
#include "sim_bridge/shm_channel.h"
#include "sim_bridge/sim_wire.h"
#include "sim_bridge/vector_env.h"
#include "zmq.hpp"

namespace rlforge::sim {

class SimServer {
 public:
  // Binds `address` ("tcp://127.0.0.1:0" picks a port; "ipc:///tmp/x.sock";
  // "shm://name": one client on this host, see shm_channel.h; `shm` sets how
  // long it spins for the next request before sleeping).
  static absl::StatusOr<std::unique_ptr<SimServer>> Bind(zmq::context_t& ctx,
                                                         std::unique_ptr<LocalVectorEnv> envs,
                                                         const std::string& address,
                                                         ShmChannel::Options shm = {});
  std::string endpoint() const { return endpoint_; }
  // Handles at most one request, waiting up to timeout_ms; false when none came.
  bool ServeOne(int timeout_ms);
  // Serves until *stop becomes non-zero.
  void Serve(const std::atomic<int>* stop);
  uint64_t requests_served() const { return served_; }

 private:
  SimServer(zmq::socket_t socket, std::unique_ptr<ShmChannel> shm, std::string endpoint,
            std::unique_ptr<LocalVectorEnv> envs);
  // Decodes, handles and encodes one request's frames (without a routing id).
  std::vector<zmq::message_t> Answer(std::vector<zmq::message_t> frames);
  SimReplyMessage Handle(absl::StatusOr<SimRequestMessage> request);
  SimReplyMessage HandleStep(SimRequestMessage& request);

  zmq::socket_t socket_;
  std::unique_ptr<ShmChannel> shm_;
  std::string endpoint_;
  std::unique_ptr<LocalVectorEnv> envs_;
  StepOutput out_;
  WireLimits limits_;
  uint64_t served_ = 0;
};

}  // namespace rlforge::sim
