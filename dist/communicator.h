// Communicator: the collectives a group of trainer ranks runs, with deadlines, over one
// backend that nothing above this file names.
//
// controller: StoreServer (c10d TCPStore, a fixed port or one the OS picks) -> address in each
//   rank's Assignment -> each rank: ConnectGroup(address, rank, size) -> gloo device on the
//   interface that routes to the store (ChooseGlooDevice) -> Communicator
//   -> AllGather / ReduceScatter / AllReduce / Broadcast, each returning a Pending handle
//
// Backends, by GroupOptions::device: "cpu" is gloo through libtorch's c10d (Debian's libtorch
// 1.13 has no gloo reduce-scatter, so it is a ring of send/recv here: each rank sends (N-1)/N
// of the buffer, the ideal); "cuda:N" is NCCL over this rank's GPU N (dist/nccl_communicator.h,
// linked only into a build against a CUDA libtorch). A group of one needs no store and moves
// no bytes, on either device.
//
// Every wait has a deadline (GroupOptions::timeout_s); a rank that died or hangs makes its
// peers' waits fail within it, naming the group and this rank, never a silent hang.
// A Communicator and its handles belong to one thread; collectives must be issued in the
// same order on every rank (as with c10d). Handles must be waited before the tensors they
// write are read, and before the next collective that writes the same tensors.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/role_names.h"

namespace rlforge::dist {

// Bytes this rank put on the wire, by collective (counted from the algorithm each runs).
struct CommStats {
  int64_t all_gather_bytes = 0, reduce_scatter_bytes = 0, all_reduce_bytes = 0, broadcast_bytes = 0;
  int64_t total() const {
    return all_gather_bytes + reduce_scatter_bytes + all_reduce_bytes + broadcast_bytes;
  }
};

// An issued collective. Wait() blocks until it finished (or its deadline passed); waiting
// twice returns the first result. Destroying an unwaited handle waits for it.
class Pending {
 public:
  virtual ~Pending() = default;
  virtual absl::Status Wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Where every tensor handed to a collective must live.
  virtual torch::Device device() const { return torch::kCPU; }

  // in: [k] contiguous on every rank; out: [size * k] contiguous, rank r's `in` at r * k.
  virtual std::unique_ptr<Pending> AllGather(const torch::Tensor& in, const torch::Tensor& out) = 0;
  // in: [size * k] contiguous; out: [k], the sum over ranks of in's block `rank`.
  // `in` is used as scratch (its other blocks are overwritten).
  virtual std::unique_ptr<Pending> ReduceScatter(const torch::Tensor& in,
                                                 const torch::Tensor& out) = 0;
  // In place: the elementwise sum over ranks.
  virtual std::unique_ptr<Pending> AllReduceSum(const torch::Tensor& t) = 0;
  // In place: root's values on every rank.
  virtual std::unique_ptr<Pending> Broadcast(const torch::Tensor& t, int root) = 0;

  const CommStats& stats() const { return stats_; }

 protected:
  CommStats stats_;
};

struct GroupOptions {
  std::string store_address;     // host:port of the StoreServer; unused for a group of one
  std::string name = kTrainerRole;  // keys in the store are prefixed with it
  int rank = 0;
  int size = 1;
  double timeout_s = 30;  // connecting, and every collective
  // Where the group's tensors live: "cpu" (gloo) or "cuda:N" (NCCL over this rank's GPU N;
  // every tensor handed to the communicator must be on that device).
  std::string device = "cpu";
};

// Where a rank's gloo device listens for its peers: every host in the group must reach it.
struct GlooDeviceAddress {
  std::string interface;  // set: the interface named by GLOO_SOCKET_IFNAME
  std::string address;    // else: this host's address on the route to the store
};
// `ifname_env` (GLOO_SOCKET_IFNAME, may be null or empty) wins; else the local address the
// kernel routes `store_host` from, which is on the network the group shares (on one host, the
// loopback). Fails naming the store when no route leads there.
absl::StatusOr<GlooDeviceAddress> ChooseGlooDevice(const std::string& store_host, int store_port,
                                                   const char* ifname_env);

// Joins the group (blocks until all `size` ranks joined or the deadline passed). A group of
// one returns a communicator whose collectives copy locally. A cuda device in a build whose
// libtorch is CPU-only, or that has no NCCL (for a group of more than one), is refused, saying
// which.
absl::StatusOr<std::unique_ptr<Communicator>> ConnectGroup(const GroupOptions& options);

// The rendezvous point of one job: a key-value store the ranks meet at. Owned by the
// controller; lives as long as the job.
class StoreServer {
 public:
  // Listens at `port` (0: one the OS picks) on every interface (c10d's TCPStore binds the
  // wildcard); `host` reaches it from this machine. address() names it by `advertise` (when
  // set, else `host`): what ranks on other hosts connect to.
  static absl::StatusOr<std::unique_ptr<StoreServer>> Start(const std::string& host, int port = 0,
                                                            const std::string& advertise = "");
  virtual ~StoreServer() = default;
  virtual std::string address() const = 0;  // host:port
};

}  // namespace rlforge::dist
