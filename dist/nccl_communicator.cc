#include "dist/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/exceptions.h"

namespace rlforge::dist {
namespace {

using Clock = std::chrono::steady_clock;

Clock::time_point DeadlineIn(double seconds) {
  return Clock::now() + std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6));
}

int64_t Bytes(const torch::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

absl::StatusOr<ncclDataType_t> NcclType(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat:
      return ncclFloat32;
    case torch::kBFloat16:
      return ncclBfloat16;
    case torch::kHalf:
      return ncclFloat16;
    case torch::kDouble:
      return ncclFloat64;
    case torch::kChar:
      return ncclInt8;
    case torch::kByte:
      return ncclUint8;
    case torch::kInt:
      return ncclInt32;
    case torch::kLong:
      return ncclInt64;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("dtype ", c10::toString(t),
                       " has no NCCL type (fp32, bf16, fp16, fp64, int8, uint8, int32, int64)"));
  }
}

std::string CudaText(cudaError_t e) {
  return absl::StrCat(cudaGetErrorName(e), ": ", cudaGetErrorString(e));
}

std::string NcclText(ncclResult_t r, ncclComm_t comm) {
  std::string s = absl::StrCat("NCCL ", ncclGetErrorString(r));
  const char* last = comm != nullptr ? ncclGetLastError(comm) : nullptr;
  if (last != nullptr && last[0] != '\0') absl::StrAppend(&s, " (", last, ")");
  return s;
}

// Polls a non-blocking communicator until its pending call finished or `deadline` passed
// (then ncclInProgress).
ncclResult_t PollAsync(ncclComm_t comm, Clock::time_point deadline) {
  ncclResult_t state = ncclInProgress;
  while (true) {
    const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) return r;
    if (state != ncclInProgress || Clock::now() >= deadline) return state;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

class Done : public Pending {
 public:
  explicit Done(absl::Status s) : status_(std::move(s)) {}
  absl::Status Wait() override { return status_; }

 private:
  absl::Status status_;
};

class NcclCommunicator;

// One enqueued collective: done when the event recorded after it has fired.
class NcclPending : public Pending {
 public:
  NcclPending(NcclCommunicator* comm, cudaEvent_t event, std::string what)
      : comm_(comm), event_(event), what_(std::move(what)) {}
  ~NcclPending() override;
  absl::Status Wait() override;

 private:
  NcclCommunicator* comm_;
  cudaEvent_t event_;
  std::string what_;
  bool finished_ = false;
  absl::Status status_;
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(GroupOptions options, int device, ncclComm_t comm, cudaStream_t stream)
      : options_(std::move(options)), device_(device), comm_(comm), stream_(stream) {}
  ~NcclCommunicator() override;
  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }
  torch::Device device() const override {
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(device_));
  }

  std::unique_ptr<Pending> AllGather(const torch::Tensor& in, const torch::Tensor& out) override;
  std::unique_ptr<Pending> ReduceScatter(const torch::Tensor& in,
                                         const torch::Tensor& out) override;
  std::unique_ptr<Pending> AllReduceSum(const torch::Tensor& t) override;
  std::unique_ptr<Pending> Broadcast(const torch::Tensor& t, int root) override;

  absl::Status WaitEvent(cudaEvent_t event, const std::string& what);
  void DestroyEvent(cudaEvent_t event);

 private:
  std::string Where() const {
    return absl::StrCat("group ", options_.name, ", rank ", rank(), " of ", size(),
                        " (cuda:", device_, ")");
  }
  absl::Status Error(const std::string& what, const std::string& detail) const;
  absl::Status CheckTensor(const std::string& what, const char* name, const torch::Tensor& t,
                           const torch::Tensor* same_dtype) const;
  std::unique_ptr<Pending> Issue(const std::string& what, absl::Status checked,
                                 const std::function<ncclResult_t(ncclDataType_t)>& op,
                                 torch::ScalarType dtype);
  void Abort(absl::Status why);

  GroupOptions options_;
  int device_;
  ncclComm_t comm_;  // null once aborted or destroyed
  cudaStream_t stream_;
  absl::Status aborted_;  // why the communicator was aborted; ok while it was not
};

absl::Status NcclCommunicator::Error(const std::string& what, const std::string& detail) const {
  return absl::UnavailableError(absl::StrCat(Where(), ": ", what,
                                             " failed (a peer rank died, hangs, or passed its ",
                                             options_.timeout_s, " s deadline): ", detail));
}

absl::Status NcclCommunicator::CheckTensor(const std::string& what, const char* name,
                                           const torch::Tensor& t,
                                           const torch::Tensor* same_dtype) const {
  if (!t.defined() || t.device() != device()) {
    return absl::InvalidArgumentError(absl::StrCat(
        Where(), ": ", what, ": ", name, " is on ", t.defined() ? t.device().str() : "no device",
        "; this group's tensors must be on ", device().str()));
  }
  if (!t.is_contiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(), ": ", what, ": ", name, " is not contiguous"));
  }
  if (same_dtype != nullptr && same_dtype->scalar_type() != t.scalar_type()) {
    return absl::InvalidArgumentError(absl::StrCat(
        Where(), ": ", what, ": in and out differ in ", "dtype (", c10::toString(t.scalar_type()),
        " and ", c10::toString(same_dtype->scalar_type()), ")"));
  }
  return absl::OkStatus();
}

// Enqueues `op` on the stream and records the event a Pending polls.
std::unique_ptr<Pending> NcclCommunicator::Issue(
    const std::string& what, absl::Status checked,
    const std::function<ncclResult_t(ncclDataType_t)>& op, torch::ScalarType dtype) {
  if (!aborted_.ok()) {
    return std::make_unique<Done>(
        Error(what, absl::StrCat("aborted earlier: ", aborted_.message())));
  }
  absl::StatusOr<ncclDataType_t> type = NcclType(dtype);
  if (checked.ok() && !type.ok()) {
    checked = absl::InvalidArgumentError(
        absl::StrCat(Where(), ": ", what, ": ", type.status().message()));
  }
  if (!checked.ok()) return std::make_unique<Done>(std::move(checked));
  cudaError_t e = cudaSetDevice(device_);
  if (e != cudaSuccess) return std::make_unique<Done>(Error(what, CudaText(e)));
  ncclResult_t r = op(*type);
  if (r == ncclInProgress) r = PollAsync(comm_, DeadlineIn(options_.timeout_s));
  if (r != ncclSuccess) {
    absl::Status s = Error(what, NcclText(r, comm_));
    Abort(s);
    return std::make_unique<Done>(std::move(s));
  }
  cudaEvent_t event = nullptr;
  e = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
  if (e == cudaSuccess) e = cudaEventRecord(event, stream_);
  if (e != cudaSuccess) {
    if (event != nullptr) cudaEventDestroy(event);
    return std::make_unique<Done>(Error(what, CudaText(e)));
  }
  return std::make_unique<NcclPending>(this, event, what);
}

std::unique_ptr<Pending> NcclCommunicator::AllGather(const torch::Tensor& in,
                                                     const torch::Tensor& out) {
  const int64_t k = in.numel();
  absl::Status s = CheckTensor("all_gather", "in", in, nullptr);
  if (s.ok()) s = CheckTensor("all_gather", "out", out, &in);
  if (s.ok() && out.numel() != k * size()) {
    s = absl::InvalidArgumentError(absl::StrCat(Where(), ": all_gather: needs in [k] and out [",
                                                size(), " * k], got ", k, " and ", out.numel()));
  }
  if (s.ok()) stats_.all_gather_bytes += Bytes(in) * (size() - 1);
  return Issue(
      "all_gather", s,
      [&](ncclDataType_t t) {
        return ncclAllGather(in.data_ptr(), out.data_ptr(), static_cast<size_t>(k), t, comm_,
                             stream_);
      },
      in.scalar_type());
}

std::unique_ptr<Pending> NcclCommunicator::ReduceScatter(const torch::Tensor& in,
                                                         const torch::Tensor& out) {
  const int64_t k = out.numel();
  absl::Status s = CheckTensor("reduce_scatter", "in", in, nullptr);
  if (s.ok()) s = CheckTensor("reduce_scatter", "out", out, &in);
  if (s.ok() && in.numel() != k * size()) {
    s = absl::InvalidArgumentError(absl::StrCat(Where(), ": reduce_scatter: needs in [", size(),
                                                " * k] and out [k], got ", in.numel(), " and ", k));
  }
  if (s.ok()) stats_.reduce_scatter_bytes += Bytes(out) * (size() - 1);
  return Issue(
      "reduce_scatter", s,
      [&](ncclDataType_t t) {
        return ncclReduceScatter(in.data_ptr(), out.data_ptr(), static_cast<size_t>(k), t, ncclSum,
                                 comm_, stream_);
      },
      in.scalar_type());
}

std::unique_ptr<Pending> NcclCommunicator::AllReduceSum(const torch::Tensor& t) {
  const absl::Status s = CheckTensor("all_reduce", "t", t, nullptr);
  if (s.ok()) stats_.all_reduce_bytes += 2 * Bytes(t) * (size() - 1) / size();
  return Issue(
      "all_reduce", s,
      [&](ncclDataType_t type) {
        return ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), type,
                             ncclSum, comm_, stream_);
      },
      t.scalar_type());
}

std::unique_ptr<Pending> NcclCommunicator::Broadcast(const torch::Tensor& t, int root) {
  absl::Status s = CheckTensor("broadcast", "t", t, nullptr);
  if (s.ok() && (root < 0 || root >= size())) {
    s = absl::InvalidArgumentError(
        absl::StrCat(Where(), ": broadcast: root ", root, " is not a rank of the group"));
  }
  if (s.ok() && rank() == root && size() > 1) stats_.broadcast_bytes += Bytes(t);
  return Issue(
      "broadcast", s,
      [&](ncclDataType_t type) {
        return ncclBroadcast(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), type, root,
                             comm_, stream_);
      },
      t.scalar_type());
}

absl::Status NcclCommunicator::WaitEvent(cudaEvent_t event, const std::string& what) {
  const Clock::time_point deadline = DeadlineIn(options_.timeout_s);
  while (true) {
    if (!aborted_.ok()) return Error(what, absl::StrCat("aborted earlier: ", aborted_.message()));
    cudaError_t e = cudaSetDevice(device_);
    if (e == cudaSuccess) e = cudaEventQuery(event);
    if (e == cudaSuccess) return absl::OkStatus();
    if (e != cudaErrorNotReady) return Error(what, CudaText(e));
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
    if (r != ncclSuccess || (state != ncclSuccess && state != ncclInProgress)) {
      absl::Status s = Error(what, NcclText(r != ncclSuccess ? r : state, comm_));
      Abort(s);
      return s;
    }
    if (Clock::now() >= deadline) {
      absl::Status s = Error(what, absl::StrCat("not done after ", options_.timeout_s,
                                                " s; the communicator is aborted"));
      Abort(s);
      return s;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void NcclCommunicator::DestroyEvent(cudaEvent_t event) {
  if (cudaSetDevice(device_) == cudaSuccess) cudaEventDestroy(event);
}

void NcclCommunicator::Abort(absl::Status why) {
  if (comm_ == nullptr) return;
  if (cudaSetDevice(device_) == cudaSuccess) ncclCommAbort(comm_);
  comm_ = nullptr;
  aborted_ = std::move(why);
}

// Finalize flushes what is queued; a peer that never finishes it makes this abort instead,
// within the deadline, so destruction never hangs.
NcclCommunicator::~NcclCommunicator() {
  if (cudaSetDevice(device_) != cudaSuccess) return;
  if (comm_ != nullptr) {
    ncclResult_t r = ncclCommFinalize(comm_);
    if (r == ncclInProgress) r = PollAsync(comm_, DeadlineIn(options_.timeout_s));
    if (r == ncclSuccess) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
  }
  cudaStreamDestroy(stream_);
}

NcclPending::~NcclPending() {
  (void)Wait();
  comm_->DestroyEvent(event_);
}

absl::Status NcclPending::Wait() {
  if (!finished_) {
    finished_ = true;
    status_ = comm_->WaitEvent(event_, what_);
  }
  return status_;
}

std::string GroupWhere(const GroupOptions& o, int device) {
  return absl::StrCat("group ", o.name, ", rank ", o.rank, " of ", o.size, " (cuda:", device, ")");
}

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown-host";
  return name;
}

std::string AsString(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

// NCCL refuses two ranks on one GPU with an error that names neither rank: every rank
// publishes "<host> <PCI bus id>" and reads everyone's first. Blocks until every rank
// published or the store's timeout (the group's deadline) passed.
absl::Status CheckOneGpuPerRank(const GroupOptions& o, int device, c10d::Store& store) {
  char bus[32] = {};
  const cudaError_t e = cudaDeviceGetPCIBusId(bus, sizeof(bus), device);
  if (e != cudaSuccess) {
    return absl::FailedPreconditionError(
        absl::StrCat(GroupWhere(o, device), ": GPU ", device, ": ", CudaText(e)));
  }
  const std::string mine = absl::StrCat(HostName(), " ", bus);
  store.set(NcclGpuKey(o.rank), std::vector<uint8_t>(mine.begin(), mine.end()));
  std::map<std::string, int> first_rank;
  for (int r = 0; r < o.size; ++r) {
    const std::string gpu = AsString(store.get(NcclGpuKey(r)));
    const auto [it, fresh] = first_rank.emplace(gpu, r);
    if (!fresh) {
      return absl::FailedPreconditionError(absl::StrCat(
          GroupWhere(o, device), ": ranks ", it->second, " and ", r, " are both on GPU ", gpu,
          " (host, PCI bus id); NCCL needs a GPU per rank: run no more ranks on a host than it "
          "has GPUs, or give each rank its own (cuda resolves to GPU rank mod visible GPUs)"));
    }
  }
  return absl::OkStatus();
}

// Rank 0 makes the id; the others wait for it in the store.
absl::StatusOr<ncclUniqueId> ShareUniqueId(const GroupOptions& o, int device, c10d::Store* store) {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (o.rank == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) {
      return absl::UnavailableError(
          absl::StrCat(GroupWhere(o, device), ": ncclGetUniqueId: ", NcclText(r, nullptr)));
    }
    const auto* bytes = reinterpret_cast<const uint8_t*>(&id);
    if (store != nullptr) store->set("nccl_id", std::vector<uint8_t>(bytes, bytes + sizeof(id)));
    return id;
  }
  const std::vector<uint8_t> got = store->get("nccl_id");
  if (got.size() != sizeof(id)) {
    return absl::InternalError(absl::StrCat(GroupWhere(o, device), ": the store's nccl_id has ",
                                            got.size(), " bytes, expected ", sizeof(id)));
  }
  std::memcpy(&id, got.data(), sizeof(id));
  return id;
}

// Non-blocking init, polled: a peer that never initialises makes this abort at the deadline
// rather than hang in NCCL's bootstrap.
absl::StatusOr<ncclComm_t> InitComm(const GroupOptions& o, int device, const ncclUniqueId& id,
                                    Clock::time_point deadline) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, o.size, id, o.rank, &config);
  if (r == ncclInProgress || (r == ncclSuccess && comm != nullptr)) r = PollAsync(comm, deadline);
  if (r == ncclSuccess) return comm;
  const std::string detail =
      r == ncclInProgress
          ? absl::StrCat("not done after ", o.timeout_s, " s (a peer rank never joined, or hangs)")
          : NcclText(r, comm);
  if (comm != nullptr) ncclCommAbort(comm);
  return absl::UnavailableError(
      absl::StrCat(GroupWhere(o, device), ": initialising NCCL failed: ", detail));
}

absl::StatusOr<std::unique_ptr<Communicator>> Connect(const GroupOptions& o, int device,
                                                      c10d::Store* store) {
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) {
    return absl::FailedPreconditionError(
        absl::StrCat(GroupWhere(o, device), ": cudaSetDevice(", device, "): ", CudaText(e)));
  }
  if (store != nullptr) {
    const absl::Status one = CheckOneGpuPerRank(o, device, *store);
    if (!one.ok()) return one;
  }
  absl::StatusOr<ncclUniqueId> id = ShareUniqueId(o, device, store);
  if (!id.ok()) return id.status();
  // A deadline of its own: the store's waits above may have used most of theirs for a rank
  // that came late but came.
  absl::StatusOr<ncclComm_t> comm = InitComm(o, device, *id, DeadlineIn(o.timeout_s));
  if (!comm.ok()) return comm.status();
  cudaStream_t stream = nullptr;
  e = cudaStreamCreate(&stream);  // blocking: ordered with the legacy default stream
  if (e != cudaSuccess) {
    ncclCommAbort(*comm);
    return absl::FailedPreconditionError(
        absl::StrCat(GroupWhere(o, device), ": cudaStreamCreate: ", CudaText(e)));
  }
  return std::unique_ptr<Communicator>(new NcclCommunicator(o, device, *comm, stream));
}

}  // namespace

std::string NcclGpuKey(int rank) { return absl::StrCat("nccl_gpu/", rank); }

absl::StatusOr<std::unique_ptr<Communicator>> ConnectNcclGroup(
    const GroupOptions& options, int device, const c10::intrusive_ptr<c10d::Store>& store) {
  if (options.size > 1 && !store) {
    return absl::InvalidArgumentError(
        absl::StrCat(GroupWhere(options, device), ": a group of more than one needs a store"));
  }
  // The store throws (c10::Error) when a key does not come within its timeout.
  return CallCatching(
      [&] { return Connect(options, device, store.get()); },
      absl::StrCat(GroupWhere(options, device),
                   ": meeting the other ranks in the store failed (a rank never joined within ",
                   options.timeout_s, " s?): ")
          .c_str());
}

}  // namespace rlforge::dist
