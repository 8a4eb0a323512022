// RMSNorm (with the residual add fused), RoPE and SiLU-and-multiply (kernels/cuda_kernels.h).
// Every product and sum that the contract rounds is written with the _rn intrinsics, so the
// compiler cannot fuse it into an FMA that would round differently from the reference.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda_kernels.h"
#include "kernels/device_util.cuh"

namespace rlforge::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// One block per row. Each thread keeps to its own elements, so out may alias x.
template <typename T>
__global__ void __launch_bounds__(kThreads) RmsNorm(RmsNormArgs a) {
  const int64_t row = int64_t{blockIdx.x} * a.dim;
  const T* x = static_cast<const T*>(a.x) + row;
  T* residual = a.residual ? static_cast<T*>(a.residual) + row : nullptr;
  double squares = 0;
  for (int i = threadIdx.x; i < a.dim; i += kThreads) {
    float h = ToFloat(x[i]);
    if (residual) {
      h = RoundTo<T>(__fadd_rn(h, ToFloat(residual[i])));
      residual[i] = FromFloat<T>(h);
    }
    squares += double{h} * h;
  }
  squares = BlockSum(squares);
  const float inv = static_cast<float>(1.0 / sqrt(squares / a.dim + a.eps));
  const T* weight = static_cast<const T*>(a.weight);
  T* out = static_cast<T*>(a.out) + row;
  for (int i = threadIdx.x; i < a.dim; i += kThreads) {
    const float h = residual ? ToFloat(residual[i]) : ToFloat(x[i]);
    out[i] = FromFloat<T>(__fmul_rn(ToFloat(weight[i]), RoundTo<T>(__fmul_rn(h, inv))));
  }
}

// One block per row; each thread rotates pairs (i, i + half) of q's and k's heads.
template <typename T>
__global__ void __launch_bounds__(kThreads) Rope(RopeArgs a) {
  const int32_t r = blockIdx.x, half = a.rotary_dim / 2;
  const int32_t heads = a.num_heads + a.num_kv_heads;
  const float position = static_cast<float>(a.positions[r]);
  for (int32_t item = threadIdx.x; item < heads * half; item += blockDim.x) {
    const int32_t h = item / half, i = item % half;
    const float angle = __fmul_rn(position, a.inv_freq[i]);
    const float c = RoundTo<T>(__fmul_rn(cosf(angle), a.attention_factor));
    const float s = RoundTo<T>(__fmul_rn(sinf(angle), a.attention_factor));
    T* x = h < a.num_heads ? static_cast<T*>(a.q) + (int64_t{r} * a.num_heads + h) * a.head_dim
                           : static_cast<T*>(a.k) +
                                 (int64_t{r} * a.num_kv_heads + h - a.num_heads) * a.head_dim;
    const float x1 = ToFloat(x[i]), x2 = ToFloat(x[i + half]);
    x[i] = FromFloat<T>(__fsub_rn(RoundTo<T>(__fmul_rn(x1, c)), RoundTo<T>(__fmul_rn(x2, s))));
    x[i + half] =
        FromFloat<T>(__fadd_rn(RoundTo<T>(__fmul_rn(x2, c)), RoundTo<T>(__fmul_rn(x1, s))));
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) SiluMul(SiluMulArgs a) {
  const int64_t n = int64_t{a.rows} * a.inner;
  for (int64_t at = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; at < n;
       at += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = at / a.inner, i = at % a.inner;
    const T* x = static_cast<const T*>(a.x) + r * 2 * a.inner;
    const float g = ToFloat(x[i]), u = ToFloat(x[a.inner + i]);
    const float silu = RoundTo<T>(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))));
    static_cast<T*>(a.out)[at] = FromFloat<T>(__fmul_rn(silu, u));
  }
}

}  // namespace

int LaunchRmsNorm(const RmsNormArgs& a, void* stream) {
  if (a.rows < 0 || a.dim <= 0 || a.weight == nullptr) return Check(cudaErrorInvalidValue);
  if (a.rows == 0) return 0;
  auto s = static_cast<cudaStream_t>(stream);
  return ForDtype(a.dtype, [&](auto t) { RmsNorm<decltype(t)><<<a.rows, kThreads, 0, s>>>(a); });
}

int LaunchRope(const RopeArgs& a, void* stream) {
  if (a.rows < 0 || a.rotary_dim <= 0 || a.rotary_dim % 2 != 0 || a.rotary_dim > a.head_dim ||
      a.num_heads <= 0 || a.num_kv_heads < 0) {
    return Check(cudaErrorInvalidValue);
  }
  if (a.rows == 0) return 0;
  auto s = static_cast<cudaStream_t>(stream);
  return ForDtype(a.dtype, [&](auto t) { Rope<decltype(t)><<<a.rows, kThreads, 0, s>>>(a); });
}

int LaunchSiluMul(const SiluMulArgs& a, void* stream) {
  if (a.rows < 0 || a.inner <= 0) return Check(cudaErrorInvalidValue);
  if (a.rows == 0) return 0;
  const int64_t n = int64_t{a.rows} * a.inner;
  const int blocks = static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535));
  auto s = static_cast<cudaStream_t>(stream);
  return ForDtype(a.dtype, [&](auto t) { SiluMul<decltype(t)><<<blocks, kThreads, 0, s>>>(a); });
}

}  // namespace rlforge::kernels::cuda
