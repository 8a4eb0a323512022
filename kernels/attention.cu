// Paged attention and the KV-cache write (kernels/cuda_kernels.h).
//
// Attention runs in two kernels. AttendPartition: one block per (row, head, partition of
// kAttentionPartition context positions); each warp takes positions in turn and reduces
// q . k over head_dim across its lanes (coalesced reads of one key), the block takes the
// partition's softmax max and sum, then each thread sums p_t * v_t for its dimensions
// (coalesced across threads). It writes the partition's max, sum and unnormalised output to
// the workspace. MergePartitions: one block per (row, head) rescales every partition to the
// common max and divides by the common sum. Only positions inside a row's context are read.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

#include "kernels/cuda_kernels.h"
#include "kernels/device_util.cuh"

namespace rlforge::kernels::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;

int32_t Partitions(const PagedAttentionArgs& a) {
  return (a.max_context + kAttentionPartition - 1) / kAttentionPartition;
}

struct Workspace {
  float* max;  // [rows * heads * partitions]
  float* sum;  // [rows * heads * partitions]
  float* acc;  // [rows * heads * partitions * head_dim]
};

Workspace Carve(const PagedAttentionArgs& a, void* workspace) {
  const int64_t n = int64_t{a.rows} * a.num_heads * Partitions(a);
  auto* base = static_cast<float*>(workspace);
  return {base, base + n, base + 2 * n};
}

struct RowView {
  const int32_t* table;
  int64_t skip_from, skip;
};

__device__ RowView ViewOf(const PagedAttentionArgs& a, int32_t r) {
  const int32_t s = a.row_seq[r];
  return {a.tables + a.table_start[s],
          a.seq_skip_from ? a.seq_skip_from[s] : std::numeric_limits<int64_t>::max(),
          a.seq_skip ? a.seq_skip[s] : 0};
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    AttendPartition(PagedAttentionArgs a, Workspace ws, int32_t partitions) {
  __shared__ float q[kMaxHeadDim];
  __shared__ float p[kAttentionPartition];
  const int32_t rh = blockIdx.x, part = blockIdx.y;
  const int32_t r = rh / a.num_heads, h = rh % a.num_heads, d_head = a.head_dim;
  const int32_t begin = part * kAttentionPartition;
  const int32_t end = min(a.row_context[r], begin + kAttentionPartition);
  const int64_t out = int64_t{rh} * partitions + part;
  if (begin >= end) {  // past this row's context: an empty partition
    if (threadIdx.x == 0) {
      ws.max[out] = -INFINITY;
      ws.sum[out] = 0;
    }
    for (int d = threadIdx.x; d < d_head; d += kThreads) ws.acc[out * d_head + d] = 0;
    return;
  }
  const T* qrow = static_cast<const T*>(a.q) + int64_t{rh} * d_head;
  for (int d = threadIdx.x; d < d_head; d += kThreads) q[d] = ToFloat(qrow[d]);
  __syncthreads();
  const RowView view = ViewOf(a, r);
  const int64_t width = int64_t{a.num_kv_heads} * d_head;
  const int64_t head_at = int64_t{h / (a.num_heads / a.num_kv_heads)} * d_head;
  const T* k_pool = static_cast<const T*>(a.k_pool);
  const T* v_pool = static_cast<const T*>(a.v_pool);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int32_t t = begin + warp; t < end; t += kWarps) {
    const T* k = k_pool +
                 PagedSlot(view.table, a.block_size, t, view.skip_from, view.skip) * width +
                 head_at;
    float dot = 0;
    for (int d = lane; d < d_head; d += 32) dot += q[d] * ToFloat(k[d]);
    dot = WarpSum(dot);
    if (lane == 0) p[t - begin] = dot * a.scale;
  }
  __syncthreads();
  const int32_t n = end - begin;
  float m = -INFINITY;
  for (int i = threadIdx.x; i < n; i += kThreads) m = fmaxf(m, p[i]);
  m = BlockMax(m);
  float l = 0;
  for (int i = threadIdx.x; i < n; i += kThreads) l += (p[i] = expf(p[i] - m));
  l = BlockSum(l);  // its barriers also publish p
  for (int d = threadIdx.x; d < d_head; d += kThreads) {
    float acc = 0;
    for (int32_t t = begin; t < end; ++t) {
      const int64_t slot = PagedSlot(view.table, a.block_size, t, view.skip_from, view.skip);
      acc += p[t - begin] * ToFloat(v_pool[slot * width + head_at + d]);
    }
    ws.acc[out * d_head + d] = acc;
  }
  if (threadIdx.x == 0) {
    ws.max[out] = m;
    ws.sum[out] = l;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    MergePartitions(PagedAttentionArgs a, Workspace ws, int32_t partitions) {
  const int32_t rh = blockIdx.x, d_head = a.head_dim;
  const int64_t first = int64_t{rh} * partitions;
  float m = -INFINITY;
  for (int32_t i = 0; i < partitions; ++i) m = fmaxf(m, ws.max[first + i]);
  float l = 0;
  for (int32_t i = 0; i < partitions; ++i) l += ws.sum[first + i] * expf(ws.max[first + i] - m);
  T* out = static_cast<T*>(a.out) + int64_t{rh} * d_head;
  for (int d = threadIdx.x; d < d_head; d += blockDim.x) {
    float acc = 0;
    for (int32_t i = 0; i < partitions; ++i) {
      acc += ws.acc[(first + i) * d_head + d] * expf(ws.max[first + i] - m);
    }
    out[d] = FromFloat<T>(acc / l);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) WriteKv(KvWriteArgs a) {
  const int64_t width = int64_t{a.num_kv_heads} * a.head_dim, r = blockIdx.x;
  const int64_t to = a.slots[r] * width;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
    static_cast<T*>(a.k_pool)[to + i] = static_cast<const T*>(a.k)[r * width + i];
    static_cast<T*>(a.v_pool)[to + i] = static_cast<const T*>(a.v)[r * width + i];
  }
}

}  // namespace

int64_t PagedAttentionWorkspaceBytes(const PagedAttentionArgs& a) {
  return int64_t{a.rows} * a.num_heads * Partitions(a) * (a.head_dim + 2) * 4;
}

int LaunchPagedAttention(const PagedAttentionArgs& a, void* workspace, void* stream) {
  if (a.rows < 0 || a.num_heads <= 0 || a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0 ||
      a.head_dim <= 0 || a.head_dim > kMaxHeadDim || a.block_size <= 0 || a.max_context <= 0 ||
      workspace == nullptr) {
    return Check(cudaErrorInvalidValue);
  }
  if (a.rows == 0) return 0;
  auto s = static_cast<cudaStream_t>(stream);
  const int32_t partitions = Partitions(a);
  const Workspace ws = Carve(a, workspace);
  const dim3 grid(a.rows * a.num_heads, partitions);
  if (int e = ForDtype(a.dtype, [&](auto t) {
        AttendPartition<decltype(t)><<<grid, kThreads, 0, s>>>(a, ws, partitions);
      })) {
    return e;
  }
  return ForDtype(a.dtype, [&](auto t) {
    MergePartitions<decltype(t)><<<a.rows * a.num_heads, kThreads, 0, s>>>(a, ws, partitions);
  });
}

int LaunchKvWrite(const KvWriteArgs& a, void* stream) {
  if (a.rows < 0 || a.num_kv_heads <= 0 || a.head_dim <= 0) return Check(cudaErrorInvalidValue);
  if (a.rows == 0) return 0;
  auto s = static_cast<cudaStream_t>(stream);
  return ForDtype(a.dtype, [&](auto t) { WriteKv<decltype(t)><<<a.rows, kThreads, 0, s>>>(a); });
}

}  // namespace rlforge::kernels::cuda
