// Paged decode attention on the GPU against the device's copy bandwidth, measured in the same
// run (issue target: at least 60% of it). A Qwen2.5-0.5B-shaped layer (14 query heads, 2 kv
// heads, head_dim 64) in bf16, a GRPO-shaped decode batch (64 sequences x 8 samples, contexts
// 256-2304 positions, 16-position blocks scattered over the pool). Bytes counted: each row's
// k and v over its context, q and out; the copy counts bytes read and written. Best of --reps
// timed with CUDA events after warm-up.
//
//   build/bench/gpu_attention_bench [--reps 20]
//
// Without a usable GPU it says why and exits 77.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda_kernels.h"

namespace {

using rlforge::kernels::DType;
using rlforge::kernels::PagedAttentionArgs;

#define CHECK_CUDA(expr)                                                                      \
  do {                                                                                        \
    const int e_ = static_cast<int>(expr);                                                    \
    if (e_ != 0) {                                                                            \
      std::fprintf(stderr, "%s: %s\n", #expr, rlforge::kernels::cuda::ErrorText(e_).c_str()); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

template <typename V>
V* Upload(const std::vector<V>& host) {
  void* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, std::max<size_t>(host.size() * sizeof(V), 1)));
  CHECK_CUDA(cudaMemcpy(p, host.data(), host.size() * sizeof(V), cudaMemcpyHostToDevice));
  return static_cast<V*>(p);
}

// Best time in ms of `reps` runs of f (after 3 warm-ups), by CUDA events.
template <typename F>
float BestMs(int reps, F f) {
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) f();
  float best = 1e30f;
  for (int i = 0; i < reps; ++i) {
    CHECK_CUDA(cudaEventRecord(start));
    f();
    CHECK_CUDA(cudaEventRecord(stop));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    best = std::min(best, ms);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::max(1, std::atoi(argv[i + 1]));
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("gpu_attention_bench: no usable CUDA device\n");
    return 77;
  }
  const int32_t rows = 512, heads = 14, kv_heads = 2, dim = 64, block = 16;
  std::mt19937 rng(1);
  std::vector<int32_t> context(rows), seq(rows), tables, start{0};
  int64_t blocks = 0;
  for (int32_t r = 0; r < rows; ++r) {
    context[r] = 256 + static_cast<int32_t>(rng() % 2049);
    seq[r] = r;
    blocks += (context[r] + block - 1) / block;
  }
  std::vector<int32_t> ids(blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  for (int32_t r = 0, next = 0; r < rows; ++r) {
    for (int32_t b = 0; b < (context[r] + block - 1) / block; ++b) tables.push_back(ids[next++]);
    start.push_back(static_cast<int32_t>(tables.size()));
  }
  const int64_t pool_elems = blocks * block * kv_heads * dim;
  void *k = nullptr, *v = nullptr, *q = nullptr, *out = nullptr, *ws = nullptr;
  CHECK_CUDA(cudaMalloc(&k, pool_elems * 2));
  CHECK_CUDA(cudaMalloc(&v, pool_elems * 2));
  CHECK_CUDA(cudaMemset(k, 0x3c, pool_elems * 2));  // bf16 ~0.0115: finite values
  CHECK_CUDA(cudaMemset(v, 0x3c, pool_elems * 2));
  CHECK_CUDA(cudaMalloc(&q, int64_t{rows} * heads * dim * 2));
  CHECK_CUDA(cudaMemset(q, 0x3c, int64_t{rows} * heads * dim * 2));
  CHECK_CUDA(cudaMalloc(&out, int64_t{rows} * heads * dim * 2));
  PagedAttentionArgs a;
  a.q = q, a.k_pool = k, a.v_pool = v, a.out = out;
  a.row_seq = Upload(seq), a.row_context = Upload(context), a.tables = Upload(tables);
  a.table_start = Upload(start), a.rows = rows, a.num_heads = heads, a.num_kv_heads = kv_heads;
  a.head_dim = dim, a.block_size = block;
  a.max_context = *std::max_element(context.begin(), context.end());
  a.scale = 0.125f, a.dtype = DType::kBF16;
  CHECK_CUDA(cudaMalloc(&ws, rlforge::kernels::cuda::PagedAttentionWorkspaceBytes(a)));

  const int64_t positions = std::accumulate(context.begin(), context.end(), int64_t{0});
  const double attention_bytes =
      static_cast<double>(positions) * kv_heads * dim * 2 * 2 + 2.0 * rows * heads * dim * 2;
  const float attention_ms = BestMs(
      reps, [&] { CHECK_CUDA(rlforge::kernels::cuda::LaunchPagedAttention(a, ws, nullptr)); });
  const int64_t copy_bytes = pool_elems * 2;
  void* dst = nullptr;
  CHECK_CUDA(cudaMalloc(&dst, copy_bytes));
  const float copy_ms = BestMs(
      reps, [&] { CHECK_CUDA(cudaMemcpyAsync(dst, k, copy_bytes, cudaMemcpyDeviceToDevice)); });
  const double attention_gbs = attention_bytes / attention_ms / 1e6;
  const double copy_gbs = 2.0 * copy_bytes / copy_ms / 1e6;  // read + written
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s\n", prop.name);
  std::printf("decode attention: %d rows, %lld positions, %.3f ms, %.0f GB/s\n", rows,
              static_cast<long long>(positions), attention_ms, attention_gbs);
  std::printf("device copy: %.1f MB, %.3f ms, %.0f GB/s (read + written)\n", copy_bytes / 1e6,
              copy_ms, copy_gbs);
  std::printf("attention / copy bandwidth: %.2f (target >= 0.60)\n", attention_gbs / copy_gbs);
  return 0;
}
