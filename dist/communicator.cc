#include "dist/communicator.h"

#include <chrono>
#include <cstdlib>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/exceptions.h"
#include "common/net_address.h"
#include "common/status.h"
#include "config/build_info.h"
#if RLFORGE_NCCL
#include "dist/nccl_communicator.h"
#endif

namespace rlforge::dist {
namespace {

using Work = c10::intrusive_ptr<c10d::Work>;

std::chrono::milliseconds Millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

int64_t Bytes(const torch::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

// Moves bytes only, so any dtype travels as integers of its width (gloo 1.13 knows no bf16).
torch::Tensor AsBytes(const torch::Tensor& t) {
  switch (t.element_size()) {
    case 2:
      return t.view(torch::kShort);
    case 4:
      return t.view(torch::kInt);
    case 8:
      return t.view(torch::kLong);
    default:
      return t.view(torch::kByte);
  }
}

class Done : public Pending {
 public:
  explicit Done(absl::Status s = absl::OkStatus()) : status_(std::move(s)) {}
  absl::Status Wait() override { return status_; }

 private:
  absl::Status status_;
};

// A group of one: every collective is a local copy, on the group's device.
class SoloCommunicator : public Communicator {
 public:
  explicit SoloCommunicator(torch::Device device) : device_(device) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  torch::Device device() const override { return device_; }
  std::unique_ptr<Pending> AllGather(const torch::Tensor& in, const torch::Tensor& out) override {
    return Copy("all_gather", in, out);
  }
  std::unique_ptr<Pending> ReduceScatter(const torch::Tensor& in,
                                         const torch::Tensor& out) override {
    return Copy("reduce_scatter", in, out);
  }
  std::unique_ptr<Pending> AllReduceSum(const torch::Tensor& t) override {
    return std::make_unique<Done>(OnDevice("all_reduce", t));
  }
  std::unique_ptr<Pending> Broadcast(const torch::Tensor& t, int) override {
    return std::make_unique<Done>(OnDevice("broadcast", t));
  }

 private:
  // A tensor elsewhere would work here and fail once the group grows: refused alike.
  absl::Status OnDevice(const char* what, const torch::Tensor& t) const {
    if (t.device() == device_) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("group of one: ", what, ": a tensor on ",
                                                   t.device().str(), "; this group's are on ",
                                                   device_.str()));
  }
  std::unique_ptr<Pending> Copy(const char* what, const torch::Tensor& in,
                                const torch::Tensor& out) {
    absl::Status s = OnDevice(what, in);
    if (s.ok()) s = OnDevice(what, out);
    if (!s.ok()) return std::make_unique<Done>(std::move(s));
    torch::NoGradGuard ng;
    if (!in.is_same(out)) out.copy_(in);
    return std::make_unique<Done>();
  }

  torch::Device device_;
};

class GlooCommunicator;

// A ring over N ranks, one step in flight: step s sends one chunk to rank + 1 and receives
// one from rank - 1; Wait() finishes the steps still to run.
class RingPending : public Pending {
 public:
  enum class Kind { kAllGather, kReduceScatter };
  RingPending(GlooCommunicator* comm, Kind kind, torch::Tensor buffer, torch::Tensor out,
              uint32_t tag);
  ~RingPending() override { (void)Wait(); }
  absl::Status Wait() override;

 private:
  absl::Status Post();  // issues step_'s send and recv
  int64_t SendChunk() const;
  int64_t RecvChunk() const;

  GlooCommunicator* comm_;
  Kind kind_;
  torch::Tensor buffer_, out_, scratch_;
  int64_t chunk_ = 0;
  uint32_t tag_ = 0;
  int step_ = 0;
  Work send_, recv_;
  bool finished_ = false;
  absl::Status status_;
};

class WorkPending : public Pending {
 public:
  WorkPending(GlooCommunicator* comm, Work work, std::string what)
      : comm_(comm), work_(std::move(work)), what_(std::move(what)) {}
  ~WorkPending() override { (void)Wait(); }
  absl::Status Wait() override;

 private:
  GlooCommunicator* comm_;
  Work work_;
  std::string what_;
  bool finished_ = false;
  absl::Status status_;
};

class GlooCommunicator : public Communicator {
 public:
  GlooCommunicator(GroupOptions options, c10::intrusive_ptr<c10d::ProcessGroupGloo> pg)
      : options_(std::move(options)), pg_(std::move(pg)) {}
  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }

  std::unique_ptr<Pending> AllGather(const torch::Tensor& in, const torch::Tensor& out) override {
    const int64_t k = in.numel();
    if (out.numel() != k * size() || !out.is_contiguous() || !in.is_contiguous()) {
      return Fail(absl::StrCat("all_gather: needs contiguous in [k] and out [", size(),
                               " * k], got ", k, " and ", out.numel()));
    }
    {
      torch::NoGradGuard ng;
      out.view({-1}).narrow(0, rank() * k, k).copy_(in.view({-1}));
    }
    stats_.all_gather_bytes += Bytes(in) * (size() - 1);
    return std::make_unique<RingPending>(this, RingPending::Kind::kAllGather, out.view({-1}),
                                         torch::Tensor(), next_tag_++);
  }

  std::unique_ptr<Pending> ReduceScatter(const torch::Tensor& in,
                                         const torch::Tensor& out) override {
    const int64_t k = out.numel();
    if (in.numel() != k * size() || !in.is_contiguous() || in.scalar_type() != out.scalar_type()) {
      return Fail(absl::StrCat("reduce_scatter: needs contiguous in [", size(),
                               " * k] and out [k] of one dtype, got ", in.numel(), " and ", k));
    }
    stats_.reduce_scatter_bytes += Bytes(out) * (size() - 1);
    return std::make_unique<RingPending>(this, RingPending::Kind::kReduceScatter, in.view({-1}),
                                         out, next_tag_++);
  }

  std::unique_ptr<Pending> AllReduceSum(const torch::Tensor& t) override {
    stats_.all_reduce_bytes += 2 * Bytes(t) * (size() - 1) / size();
    std::vector<at::Tensor> v{t};
    return Issue([&] { return pg_->allreduce(v); }, "all_reduce");
  }

  std::unique_ptr<Pending> Broadcast(const torch::Tensor& t, int root) override {
    if (rank() == root) stats_.broadcast_bytes += Bytes(t);
    std::vector<at::Tensor> v{AsBytes(t)};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    return Issue([&] { return pg_->broadcast(v, o); }, "broadcast");
  }

  // "group trainer, rank 1 of 2: <what>: <error>"
  absl::Status Error(const std::string& what, const std::string& detail) const {
    return absl::UnavailableError(absl::StrCat("group ", options_.name, ", rank ", rank(), " of ",
                                               size(), ": ", what, " failed (a peer rank died, ",
                                               "hangs, or passed its ", options_.timeout_s,
                                               " s deadline): ", detail));
  }
  std::chrono::milliseconds timeout() const { return Millis(options_.timeout_s); }
  c10d::ProcessGroupGloo& pg() { return *pg_; }

 private:
  template <typename Fn>
  std::unique_ptr<Pending> Issue(Fn&& fn, const std::string& what) {
    try {
      return std::make_unique<WorkPending>(this, fn(), what);
    } catch (const std::exception& e) {
      return std::make_unique<Done>(Error(what, e.what()));
    }
  }
  std::unique_ptr<Pending> Fail(const std::string& what) {
    return std::make_unique<Done>(absl::InvalidArgumentError(what));
  }

  GroupOptions options_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
  uint32_t next_tag_ = 1;
};

absl::Status WaitWork(GlooCommunicator* comm, const Work& work, const std::string& what) {
  try {
    if (!work->wait(comm->timeout())) return comm->Error(what, "timed out");
    return absl::OkStatus();
  } catch (const std::exception& e) {
    std::string msg = e.what();
    return comm->Error(what, msg.substr(0, msg.find('\n')));
  }
}

absl::Status WorkPending::Wait() {
  if (!finished_) {
    finished_ = true;
    status_ = WaitWork(comm_, work_, what_);
  }
  return status_;
}

RingPending::RingPending(GlooCommunicator* comm, Kind kind, torch::Tensor buffer, torch::Tensor out,
                         uint32_t tag)
    : comm_(comm), kind_(kind), buffer_(std::move(buffer)), out_(std::move(out)), tag_(tag) {
  chunk_ = buffer_.numel() / comm_->size();
  if (kind_ == Kind::kReduceScatter) scratch_ = torch::empty({chunk_}, buffer_.options());
  status_ = Post();
}

// All-gather: step s forwards chunk (rank - s) and receives chunk (rank - s - 1) in place.
// Reduce-scatter: step s sends partial sum (rank - s - 1), receives (rank - s - 2) and adds
// its own; after N - 1 steps chunk `rank` holds the sum over every rank.
int64_t RingPending::SendChunk() const {
  const int n = comm_->size(), shift = kind_ == Kind::kAllGather ? 0 : 1;
  return ((comm_->rank() - step_ - shift) % n + 2 * n) % n;
}
int64_t RingPending::RecvChunk() const {
  const int n = comm_->size(), shift = kind_ == Kind::kAllGather ? 1 : 2;
  return ((comm_->rank() - step_ - shift) % n + 2 * n) % n;
}

absl::Status RingPending::Post() {
  const int n = comm_->size();
  if (step_ >= n - 1) return absl::OkStatus();
  try {
    std::vector<at::Tensor> s{AsBytes(buffer_.narrow(0, SendChunk() * chunk_, chunk_))};
    std::vector<at::Tensor> r{AsBytes(
        kind_ == Kind::kAllGather ? buffer_.narrow(0, RecvChunk() * chunk_, chunk_) : scratch_)};
    send_ = comm_->pg().send(s, (comm_->rank() + 1) % n, static_cast<int>(tag_));
    recv_ = comm_->pg().recv(r, (comm_->rank() + n - 1) % n, static_cast<int>(tag_));
  } catch (const std::exception& e) {
    return comm_->Error(kind_ == Kind::kAllGather ? "all_gather" : "reduce_scatter", e.what());
  }
  return absl::OkStatus();
}

absl::Status RingPending::Wait() {
  const std::string what = kind_ == Kind::kAllGather ? "all_gather" : "reduce_scatter";
  torch::NoGradGuard ng;
  while (!finished_ && status_.ok() && step_ < comm_->size() - 1) {
    status_ = WaitWork(comm_, recv_, what);
    if (status_.ok()) status_ = WaitWork(comm_, send_, what);
    if (!status_.ok()) break;
    if (kind_ == Kind::kReduceScatter)
      buffer_.narrow(0, RecvChunk() * chunk_, chunk_).add_(scratch_);
    ++step_;
    status_ = Post();
  }
  if (!finished_ && status_.ok() && kind_ == Kind::kReduceScatter) {
    out_.view({-1}).copy_(buffer_.narrow(0, comm_->rank() * chunk_, chunk_));
  }
  finished_ = true;
  return status_;
}

std::pair<std::string, int> SplitAddress(const std::string& address) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port)) {
    return {"", 0};
  }
  return {address.substr(0, colon), port};
}

class TcpStoreServer : public StoreServer {
 public:
  TcpStoreServer(std::string host, c10::intrusive_ptr<c10d::TCPStore> store)
      : host_(std::move(host)), store_(std::move(store)) {}
  std::string address() const override { return absl::StrCat(host_, ":", store_->getPort()); }

 private:
  std::string host_;
  c10::intrusive_ptr<c10d::TCPStore> store_;
};

}  // namespace

namespace {

// "cpu" -> -1; "cuda:N" -> N.
absl::StatusOr<int> GroupDevice(const GroupOptions& o) {
  if (o.device == "cpu") return -1;
  int index = -1;
  if (absl::StartsWith(o.device, "cuda:") && absl::SimpleAtoi(o.device.substr(5), &index) &&
      index >= 0) {
    return index;
  }
  return absl::InvalidArgumentError(absl::StrCat("group ", o.name, ", rank ", o.rank, ": device '",
                                                 o.device, "' is not cpu or cuda:N (N >= 0)"));
}

// The job's store, its keys prefixed with the group's name; every wait on it has the group's
// deadline.
absl::StatusOr<c10::intrusive_ptr<c10d::Store>> ConnectStore(const GroupOptions& o,
                                                             const std::string& host, int port) {
  return CallCatching(
      [&]() -> absl::StatusOr<c10::intrusive_ptr<c10d::Store>> {
        c10d::TCPStoreOptions so;
        so.port = static_cast<uint16_t>(port);
        so.isServer = false;
        so.waitWorkers = false;
        so.timeout = Millis(o.timeout_s);
        auto store = c10::make_intrusive<c10d::TCPStore>(host, so);
        return c10::intrusive_ptr<c10d::Store>(
            c10::make_intrusive<c10d::PrefixStore>(o.name, store));
      },
      absl::StrCat("group ", o.name, ", rank ", o.rank, " of ", o.size,
                   ": connecting to the store ", host, ":", port, ": ")
          .c_str());
}

absl::StatusOr<std::pair<std::string, int>> StoreHostPort(const GroupOptions& o) {
  const auto [host, port] = SplitAddress(o.store_address);
  if (host.empty() || port <= 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("group ", o.name, ": store address '", o.store_address, "' is not host:port"));
  }
  return std::make_pair(host, port);
}

absl::StatusOr<std::unique_ptr<Communicator>> ConnectCudaGroup(const GroupOptions& o, int device) {
  const std::string where = absl::StrCat("group ", o.name, ", rank ", o.rank, " of ", o.size,
                                         ": device ", o.device, ": ");
  if (!RLFORGE_TORCH_CUDA) {
    return absl::FailedPreconditionError(absl::StrCat(
        where,
        "this rlforge is built against a CPU-only libtorch (Debian's), which has no CUDA "
        "tensors and links no NCCL; build it with -DRLFORGE_CUDA=ON against the torch wheel's "
        "CUDA libtorch (docs/gpu.md)"));
  }
  if (o.size == 1) {
    return std::unique_ptr<Communicator>(
        new SoloCommunicator(torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(device))));
  }
#if RLFORGE_NCCL
  ASSIGN_OR_RETURN(const auto host_port, StoreHostPort(o));
  ASSIGN_OR_RETURN(c10::intrusive_ptr<c10d::Store> store,
                   ConnectStore(o, host_port.first, host_port.second));
  return ConnectNcclGroup(o, device, store);
#else
  return absl::FailedPreconditionError(
      absl::StrCat(where,
                   "this rlforge was built without NCCL (CMake found no libnccl beside the CUDA "
                   "toolkit or the torch wheel), so ranks on GPUs cannot form a group"));
#endif
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> ConnectGroup(const GroupOptions& o) {
  if (o.size < 1 || o.rank < 0 || o.rank >= o.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("group ", o.name, ": rank ", o.rank, " is not in a group of ", o.size));
  }
  ASSIGN_OR_RETURN(const int device, GroupDevice(o));
  if (device >= 0) return ConnectCudaGroup(o, device);
  if (o.size == 1) return std::unique_ptr<Communicator>(new SoloCommunicator(torch::kCPU));
  ASSIGN_OR_RETURN(const auto host_port, StoreHostPort(o));
  const auto& [host, port] = host_port;
  absl::StatusOr<GlooDeviceAddress> gloo_device =
      ChooseGlooDevice(host, port, std::getenv("GLOO_SOCKET_IFNAME"));
  if (!gloo_device.ok()) {
    return absl::Status(
        gloo_device.status().code(),
        absl::StrCat("group ", o.name, ", rank ", o.rank, ": ", gloo_device.status().message()));
  }
  ASSIGN_OR_RETURN(c10::intrusive_ptr<c10d::Store> store, ConnectStore(o, host, port));
  return CallCatching(
      [&]() -> absl::StatusOr<std::unique_ptr<Communicator>> {
        auto go = c10d::ProcessGroupGloo::Options::create();
        go->devices.push_back(
            gloo_device->interface.empty()
                ? c10d::ProcessGroupGloo::createDeviceForHostname(gloo_device->address)
                : c10d::ProcessGroupGloo::createDeviceForInterface(gloo_device->interface));
        go->timeout = Millis(o.timeout_s);
        go->threads = 1;
        auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, o.rank, o.size, go);
        return std::unique_ptr<Communicator>(new GlooCommunicator(o, std::move(pg)));
      },
      absl::StrCat("group ", o.name, ", rank ", o.rank, " of ", o.size, ": connecting through ",
                   o.store_address, ": ")
          .c_str());
}

absl::StatusOr<GlooDeviceAddress> ChooseGlooDevice(const std::string& store_host, int store_port,
                                                   const char* ifname_env) {
  GlooDeviceAddress d;
  if (ifname_env != nullptr && ifname_env[0] != '\0') {
    d.interface = ifname_env;
    return d;
  }
  absl::StatusOr<std::string> local = LocalAddressToward(store_host, store_port);
  if (!local.ok()) {
    return absl::Status(local.status().code(),
                        absl::StrCat("choosing the gloo device's address toward the store ",
                                     store_host, ":", store_port,
                                     " (set GLOO_SOCKET_IFNAME to "
                                     "name an interface instead): ",
                                     local.status().message()));
  }
  d.address = *local;
  return d;
}

absl::StatusOr<std::unique_ptr<StoreServer>> StoreServer::Start(const std::string& host, int port,
                                                                const std::string& advertise) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("store port ", port, " is not 0..65535"));
  }
  return CallCatching(
      [&]() -> absl::StatusOr<std::unique_ptr<StoreServer>> {
        c10d::TCPStoreOptions so;
        so.port = static_cast<uint16_t>(port);
        so.isServer = true;
        so.waitWorkers = false;
        auto store = c10::make_intrusive<c10d::TCPStore>(host, so);
        return std::unique_ptr<StoreServer>(
            new TcpStoreServer(advertise.empty() ? host : advertise, std::move(store)));
      },
      "starting the trainer ranks' rendezvous store: ");
}

}  // namespace rlforge::dist
