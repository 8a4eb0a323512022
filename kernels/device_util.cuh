// Device helpers the kernels share: dtype loads and rounding stores, and block-wide
// reductions. Included by .cu files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/kernel_args.h"

namespace rlforge::kernels::cuda {

__device__ inline float ToFloat(float v) { return v; }
__device__ inline float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ inline T FromFloat(float v);
template <>
__device__ inline float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ inline __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// v rounded to T and back (identity for fp32).
template <typename T>
__device__ inline float RoundTo(float v) {
  return ToFloat(FromFloat<T>(v));
}

__device__ inline float WarpSum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ inline double WarpSum(double v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ inline int64_t WarpSum(int64_t v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ inline float WarpMax(float v) {
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The sum (or max) of every thread's v, returned to every thread. blockDim.x is a multiple of
// 32, at most 1024; every thread of the block must call it.
template <typename V>
__device__ inline V BlockSum(V v) {
  __shared__ V partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = WarpSum(v);
  __syncthreads();  // partial may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < warps ? partial[lane] : V(0);
  return WarpSum(v);
}

__device__ inline float BlockMax(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < warps ? partial[lane] : -INFINITY;
  return WarpMax(v);
}

// A (score, id) pair: the larger score wins, the lower id among equal scores.
struct ScoredId {
  float score;
  int32_t id;
};

__device__ inline ScoredId Better(ScoredId a, ScoredId b) {
  if (b.score > a.score || (b.score == a.score && b.id < a.id)) return b;
  return a;
}

__device__ inline ScoredId WarpBest(ScoredId v) {
  for (int o = 16; o > 0; o /= 2) {
    ScoredId other{__shfl_xor_sync(0xffffffffu, v.score, o), __shfl_xor_sync(0xffffffffu, v.id, o)};
    v = Better(v, other);
  }
  return v;
}

__device__ inline ScoredId BlockBest(ScoredId v) {
  __shared__ float scores[32];
  __shared__ int32_t ids[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = WarpBest(v);
  __syncthreads();
  if (lane == 0) {
    scores[warp] = v.score;
    ids[warp] = v.id;
  }
  __syncthreads();
  v = lane < warps ? ScoredId{scores[lane], ids[lane]} : ScoredId{-INFINITY, INT32_MAX};
  return WarpBest(v);
}

inline int Check(cudaError_t e) { return static_cast<int>(e); }

// The error of the launch just made (configuration errors show here, not at the launch).
inline int LastLaunchError() { return Check(cudaGetLastError()); }

// Calls launch(T{}) with T the storage type of d (float or __nv_bfloat16); the launch's error.
template <typename Launch>
int ForDtype(DType d, Launch launch) {
  if (d == DType::kF32) {
    launch(float{});
  } else {
    launch(__nv_bfloat16{});
  }
  return LastLaunchError();
}

}  // namespace rlforge::kernels::cuda
