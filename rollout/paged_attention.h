// Paged attention over the engine's KV pool (CPU, fp32).
//
// new k, v -> WritePagedKv (slot mapping) -> pool; q + block tables -> PagedAttention -> out
//
// Pool layout, one pair per layer: k, v [num_blocks, block_size, num_kv_heads, head_dim],
// contiguous float32. Token position p of a sequence lives in slot
// table[u / block_size] * block_size + u % block_size, u = p (or p + skip past a gap). One query row is one
// new token; it attends to positions [0, context) of its own sequence, where
// context = its position + 1, so decode tokens and prefill chunks go through
// the same kernel. Grouped-query attention: query head h reads kv head
// h / (num_heads / num_kv_heads).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace rlforge {

struct PagedBatch {
  int64_t block_size = 0;
  std::vector<int32_t> row_seq;       // [rows] sequence index of each query row
  std::vector<int32_t> row_context;   // [rows] positions visible to the row (position + 1)
  std::vector<int64_t> row_slot;      // [rows] slot where the row's own k, v go
  std::vector<int32_t> tables;        // block tables of all sequences, concatenated
  std::vector<int32_t> table_start;   // [sequences + 1] offsets into `tables`
  // Optional, [sequences] each: position p of a sequence lives at slot index
  // p < skip_from ? p : p + skip of its table (a sample of a shared prompt
  // leaves the rest of the prompt's last, shared block unused). Empty: no gaps.
  std::vector<int64_t> seq_skip_from, seq_skip;
};

// pool[row_slot[r]] = kv[r] for every row. kv: [rows, num_kv_heads, head_dim].
void WritePagedKv(torch::Tensor& pool, const torch::Tensor& kv, const PagedBatch& batch);

// Which build of the row kernel runs: kAuto picks AVX2 + FMA where the CPU has both
// (every x86-64-v3 processor, AVX-512 ones included), the baseline x86-64 build
// otherwise. The two round differently (FMA); tests run both on any CPU that can.
enum class PagedKernel { kAuto, kBaseline, kAvx2 };

// Whether `kernel` can run on this CPU (kAuto and kBaseline always can).
bool PagedKernelAvailable(PagedKernel kernel);

// Attention output [rows, num_heads, head_dim] for q [rows, num_heads, head_dim].
// `kernel` must be available.
torch::Tensor PagedAttention(const torch::Tensor& q, const torch::Tensor& k_pool,
                             const torch::Tensor& v_pool, const PagedBatch& batch,
                             PagedKernel kernel = PagedKernel::kAuto);

// Reference: gathers each row's context and uses plain tensor ops. Slow; for tests.
torch::Tensor PagedAttentionReference(const torch::Tensor& q, const torch::Tensor& k_pool,
                                      const torch::Tensor& v_pool, const PagedBatch& batch);

}  // namespace rlforge
