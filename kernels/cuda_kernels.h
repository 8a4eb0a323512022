// rlforge's CUDA kernels for generation: plain CUDA over raw device pointers, one launch
// function per kernel (the arguments and their contracts: kernels/kernel_args.h; the CPU
// reference of each: kernels/reference.h). Host code that includes this needs no CUDA
// headers: a stream is passed as its cudaStream_t cast to void* (nullptr: the default
// stream), and every launch returns a cudaError_t as int (0: enqueued; an invalid argument
// is cudaErrorInvalidValue, checked before anything is enqueued). Launches are asynchronous.
//
// Built when the CUDA toolkit is found (CMake option RLFORGE_CUDA), compiled for sm_90.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/kernel_args.h"

namespace rlforge::kernels::cuda {

int LaunchKvWrite(const KvWriteArgs& a, void* stream);

// Paged attention in two passes: each row and head's context is cut into partitions of
// kAttentionPartition tokens attended in parallel (split-K), then one pass merges the
// partitions' softmax sums. `workspace` is device memory of PagedAttentionWorkspaceBytes(a).
constexpr int32_t kAttentionPartition = 512;
constexpr int32_t kMaxHeadDim = 256;
int64_t PagedAttentionWorkspaceBytes(const PagedAttentionArgs& a);
int LaunchPagedAttention(const PagedAttentionArgs& a, void* workspace, void* stream);

int LaunchRmsNorm(const RmsNormArgs& a, void* stream);
int LaunchRope(const RopeArgs& a, void* stream);
int LaunchSiluMul(const SiluMulArgs& a, void* stream);
int LaunchLogprob(const LogprobArgs& a, void* stream);
int LaunchSample(const SampleArgs& a, void* stream);

// cudaGetErrorName and cudaGetErrorString of a launch's result, e.g. for a status message.
std::string ErrorText(int error);

}  // namespace rlforge::kernels::cuda
