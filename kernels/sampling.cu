// Per-token logprobs and sampling (kernels/cuda_kernels.h). One block per row; no pass
// materialises a softmax or sorts the vocabulary. The sampler finds its candidates by
// bisection over the logits' order-preserving 32-bit keys: the top_k-th largest key exactly
// (32 counting passes), then the largest key whose set of larger-or-equal candidates holds
// top_p of their tempered mass (32 summing passes), and draws by Gumbel-max over the keys at
// or above that threshold, with the noise of kernels/sample_rng.h.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda_kernels.h"
#include "kernels/device_util.cuh"
#include "kernels/sample_rng.h"

namespace rlforge::kernels::cuda {
namespace {

constexpr int kThreads = 512;

// A key per float that orders as the floats do (negative floats below positive ones).
__device__ inline uint32_t OrderKey(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

template <typename T>
struct Row {
  const T* logits;
  int32_t vocab;
  __device__ float operator[](int32_t i) const { return ToFloat(logits[i]); }
};

// The row's max and log of sum(exp(logit - max)), on every thread.
template <typename T>
__device__ void MaxAndLogSum(const Row<T>& row, float& max, double& log_sum) {
  float m = -INFINITY;
  for (int32_t i = threadIdx.x; i < row.vocab; i += blockDim.x) m = fmaxf(m, row[i]);
  max = BlockMax(m);
  double s = 0;
  for (int32_t i = threadIdx.x; i < row.vocab; i += blockDim.x) s += exp(double{row[i]} - max);
  log_sum = log(BlockSum(s));
}

template <typename T>
__global__ void __launch_bounds__(kThreads) Logprob(LogprobArgs a) {
  const Row<T> row{static_cast<const T*>(a.logits) + int64_t{blockIdx.x} * a.vocab, a.vocab};
  float max;
  double log_sum;
  MaxAndLogSum(row, max, log_sum);
  if (threadIdx.x == 0) {
    a.logprobs[blockIdx.x] = static_cast<float>(double{row[a.targets[blockIdx.x]]} - max - log_sum);
  }
}

// The largest key k in [lo, hi] with enough(k) true, enough being true at lo and monotone
// (true up to some key, false above it).
template <typename Enough>
__device__ uint32_t LargestKey(uint32_t lo, uint32_t hi, Enough enough) {
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo) / 2 + (hi - lo) % 2;  // rounds up; no overflow
    if (enough(mid)) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// The lowest key a candidate may have: top_k, then top_p, as SampleArgs says.
template <typename T>
__device__ uint32_t CandidateFloor(const Row<T>& row, float max, float t, int32_t top_k,
                                   float top_p) {
  const uint32_t top_key = OrderKey(max);
  uint32_t floor = 0;
  if (top_k > 0 && top_k < row.vocab) {
    floor = LargestKey(0, top_key, [&](uint32_t key) {
      int64_t n = 0;
      for (int32_t i = threadIdx.x; i < row.vocab; i += blockDim.x) n += OrderKey(row[i]) >= key;
      return BlockSum(n) >= top_k;
    });
  }
  if (top_p < 1.0f) {
    auto mass = [&](uint32_t key) {
      double m = 0;
      for (int32_t i = threadIdx.x; i < row.vocab; i += blockDim.x) {
        const float l = row[i];
        if (OrderKey(l) >= key) m += exp((double{l} - max) / t);
      }
      return BlockSum(m);
    };
    const double total = mass(floor);
    floor = LargestKey(floor, top_key, [&](uint32_t key) { return mass(key) >= top_p * total; });
  }
  return floor;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) Sample(SampleArgs a) {
  const int32_t r = blockIdx.x;
  const Row<T> row{static_cast<const T*>(a.logits) + int64_t{r} * a.vocab, a.vocab};
  float max;
  double log_sum;
  MaxAndLogSum(row, max, log_sum);
  const float t = a.temperature[r];
  ScoredId best{-INFINITY, INT32_MAX};
  if (t <= 0) {
    for (int32_t i = threadIdx.x; i < row.vocab; i += blockDim.x) best = Better(best, {row[i], i});
  } else {
    const uint32_t floor = CandidateFloor(row, max, t, a.top_k[r], a.top_p[r]);
    for (int32_t i = threadIdx.x; i < row.vocab; i += blockDim.x) {
      const float l = row[i];
      if (OrderKey(l) < floor) continue;
      best = Better(best, {__fadd_rn(__fdiv_rn(l, t), GumbelNoise(a.seeds[r], a.steps[r], i)), i});
    }
  }
  best = BlockBest(best);
  if (threadIdx.x == 0) {
    a.tokens[r] = best.id;
    a.logprobs[r] = static_cast<float>(double{row[best.id]} - max - log_sum);
  }
}

}  // namespace

int LaunchLogprob(const LogprobArgs& a, void* stream) {
  if (a.rows < 0 || a.vocab <= 0) return Check(cudaErrorInvalidValue);
  if (a.rows == 0) return 0;
  auto s = static_cast<cudaStream_t>(stream);
  return ForDtype(a.dtype, [&](auto t) { Logprob<decltype(t)><<<a.rows, kThreads, 0, s>>>(a); });
}

int LaunchSample(const SampleArgs& a, void* stream) {
  if (a.rows < 0 || a.vocab <= 0) return Check(cudaErrorInvalidValue);
  if (a.rows == 0) return 0;
  auto s = static_cast<cudaStream_t>(stream);
  return ForDtype(a.dtype, [&](auto t) { Sample<decltype(t)><<<a.rows, kThreads, 0, s>>>(a); });
}

}  // namespace rlforge::kernels::cuda
