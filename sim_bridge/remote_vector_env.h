// RemoteVectorEnv: envs that live in sim_bridge servers (any language), seen
// as one VectorEnv. With several servers each step goes to all of them at
// once, so their envs step in parallel; the batch is their concatenation.
//
// actions -> split per server -> StepRequest x K (concurrently) -> StepReply x K
//   -> validated, concatenated StepOutput
//
// A server that does not answer within the timeout, answers garbage, or
// reports a SimError fails the call with a message naming the server, its
// address and the (global) env index. Not thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "sim_bridge/shm_channel.h"
#include "sim_bridge/sim_wire.h"
#include "sim_bridge/vector_env.h"
#include "zmq.hpp"

namespace rlforge::sim {

struct SimServerAddress {
  std::string name;      // "sim-0", for messages
  std::string endpoint;  // "ipc:///tmp/x.sock", "tcp://host:port", "shm://name"
};

class RemoteVectorEnv final : public VectorEnv {
 public:
  struct Options {
    int timeout_ms = 30'000;
    // How long to wait for each server's first answer (it may still be starting).
    int connect_timeout_ms = 60'000;
    // The env the job names (env.id): a server that serves another is refused, naming both.
    // Empty: whatever the servers serve.
    std::string env_id;
  };
  static absl::StatusOr<std::unique_ptr<RemoteVectorEnv>> Connect(
      zmq::context_t& ctx, std::vector<SimServerAddress> servers, Options options);

  const EnvSpec& spec() const override { return spec_; }
  int num_envs() const override { return total_envs_; }
  absl::Status Reset(absl::Span<const int64_t> seeds, std::vector<float>* obs) override;
  absl::Status Step(const void* actions, StepOutput* out) override;
  std::string location() const override;
  // One group per server, in the order given to Connect.
  int num_groups() const override { return static_cast<int>(servers_.size()); }
  int group_offset(int g) const override { return servers_.at(g).offset; }
  int group_size(int g) const override { return servers_.at(g).num_envs; }
  absl::Status BeginStep(int g, const void* actions) override;
  absl::Status EndStep(int g, StepOutput* out) override;

 private:
  struct Server {
    SimServerAddress address;
    zmq::socket_t socket;             // tcp:// and ipc:// servers
    std::unique_ptr<ShmChannel> shm;  // shm:// servers (same host)
    int num_envs = 0;
    int offset = 0;  // index of its first env in the batch
    uint64_t seq = 0;
  };
  RemoteVectorEnv(std::vector<Server> servers, Options options);
  absl::Status Send(Server& s, SimRequestMessage msg);
  // Waits for one reply from every server in `which`; fills replies[i].
  absl::Status ReceiveAll(std::vector<SimReplyMessage>* replies, int timeout_ms);
  // Waits for server s's answer to its latest request.
  absl::Status ReceiveOne(Server& s, SimReplyMessage* reply, int timeout_ms);
  // Sends s its envs' actions (`actions` points at s's first env's).
  absl::Status SendStep(Server& s, const void* actions);
  // Checks a step reply of s and writes it into out at env `out_offset`.
  absl::Status TakeStep(const Server& s, const SimReplyMessage& r, StepOutput* out, int out_offset);
  absl::Status CheckReply(const Server& s, const SimReplyMessage& r, const char* expected) const;
  std::string Where(const Server& s) const;

  std::vector<Server> servers_;
  Options options_;
  EnvSpec spec_;
  int total_envs_ = 0;
  std::vector<uint8_t> ended_;
  std::vector<uint8_t> stepping_;  // per server: a step request awaits EndStep  // episode ended on
                                   // the previous step: this one resets
  WireLimits limits_;
};

}  // namespace rlforge::sim
