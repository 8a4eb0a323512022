// The NCCL backend of dist::Communicator: the collectives of a group whose ranks each hold one
// GPU, over raw NCCL and the CUDA runtime (no CUDA libtorch headers, so CI compiles it in the
// CPU build wherever the toolkit and NCCL are found; only a CUDA-libtorch build links it into
// rlforge, through ConnectGroup).
//
// ConnectGroup("cuda:N") -> each rank publishes its host and GPU (PCI bus id) in the store;
//   two ranks on one GPU fail here, named -> rank 0 puts an ncclUniqueId in the store, the
//   others read it -> ncclCommInitRankConfig (non-blocking, polled to the group's deadline)
//   -> collectives enqueued on the communicator's own stream, each returning a Pending
//   that polls a CUDA event recorded after it.
//
// Streams: the communicator's stream is made by cudaStreamCreate, a *blocking* stream, so the
// CUDA legacy default stream orders with it both ways: work libtorch queued before a
// collective (on its current stream, which is the legacy default stream since rlforge sets no
// other) finishes before the collective starts, and work queued after it waits for it. So a
// tensor handed to a collective may be freed or rewritten by libtorch right after the call.
// Wait() is still owed before the results are used: it is where a collective that failed or
// passed its deadline is reported (its output is then garbage).
//
// Deadlines: every Wait() polls the event and ncclCommGetAsyncError until done or
// GroupOptions::timeout_s; on the deadline, or on an asynchronous NCCL error, it aborts the
// communicator (ncclCommAbort), and every later call fails at once naming that abort.
// Every CUDA and NCCL call is made with the group's device current (cudaSetDevice first, and
// left current: restoring a device the thread never used would create a context there), so a
// process may hold groups on several GPUs. One thread per communicator, as dist::Communicator.
#pragma once

#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "absl/status/statusor.h"
#include "dist/communicator.h"

namespace rlforge::dist {

// Joins `options`' group on GPU `device` (blocks until every rank initialised NCCL or the
// deadline passed). `store`: the job's store, already prefixed with the group's name; null
// only for a group of one. Errors name the group, the rank, the size and the device.
absl::StatusOr<std::unique_ptr<Communicator>> ConnectNcclGroup(
    const GroupOptions& options, int device, const c10::intrusive_ptr<c10d::Store>& store);

// The store key under which rank `rank` publishes "<host> <PCI bus id>" of its GPU.
std::string NcclGpuKey(int rank);

}  // namespace rlforge::dist
