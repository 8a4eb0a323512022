#include "rollout/paged_attention.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/check.h"
#include "common/fast_math.h"
#include "rollout/paged_attention_row.h"

namespace rlforge {

namespace {

using paged::RowArgs;
#include "rollout/paged_attention_row.inc"

inline int64_t SlotOf(const PagedBatch& b, int32_t seq, int64_t pos) {
  const int32_t* table = b.tables.data() + b.table_start[seq];
  if (!b.seq_skip_from.empty() && pos >= b.seq_skip_from[seq]) pos += b.seq_skip[seq];
  return static_cast<int64_t>(table[pos / b.block_size]) * b.block_size + pos % b.block_size;
}

bool CpuHasAvx2Fma() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}

}  // namespace

bool PagedKernelAvailable(PagedKernel kernel) {
  return kernel != PagedKernel::kAvx2 || CpuHasAvx2Fma();
}

void WritePagedKv(torch::Tensor& pool, const torch::Tensor& kv, const PagedBatch& batch) {
  RF_CHECK(pool.is_contiguous() && pool.scalar_type() == torch::kFloat32);
  torch::Tensor src = kv.contiguous();
  const int64_t row_elems = src.size(1) * src.size(2);
  const float* s = src.data_ptr<float>();
  float* d = pool.data_ptr<float>();
  for (size_t r = 0; r < batch.row_slot.size(); ++r) {
    std::memcpy(d + batch.row_slot[r] * row_elems, s + r * row_elems, row_elems * sizeof(float));
  }
}

torch::Tensor PagedAttention(const torch::Tensor& q_in, const torch::Tensor& k_pool,
                             const torch::Tensor& v_pool, const PagedBatch& batch,
                             PagedKernel kernel) {
  RF_CHECK(PagedKernelAvailable(kernel));
  torch::Tensor q = q_in.contiguous();
  const int64_t rows = q.size(0), heads = q.size(1), dim = q.size(2);
  const int64_t kv_heads = k_pool.size(2);
  RF_CHECK(k_pool.size(3) == dim && heads % kv_heads == 0);
  RF_CHECK(static_cast<int64_t>(batch.row_seq.size()) == rows);
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  torch::Tensor out = torch::empty_like(q);
  const float* qp = q.data_ptr<float>();
  const float* kp = k_pool.data_ptr<float>();
  const float* vp = v_pool.data_ptr<float>();
  float* op = out.data_ptr<float>();

  // One work item: one query row, all its heads (paged_attention_row.inc):
  // positions walked block by block (a table lookup per block, not a division
  // per position); a slot's K (then V) for every kv head is one contiguous
  // read, so the pool is streamed in order, and the n samples of a prompt are
  // neighbouring rows that find its shared blocks still in cache.
  const bool avx2 =
      kernel == PagedKernel::kAvx2 || (kernel == PagedKernel::kAuto && CpuHasAvx2Fma());
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores, acc(heads * dim);
    for (int64_t r = begin; r < end; ++r) {
      const int32_t seq = batch.row_seq[r];
      paged::RowArgs a;
      a.q = qp + r * heads * dim;
      a.k_pool = kp;
      a.v_pool = vp;
      a.table = batch.tables.data() + batch.table_start[seq];
      a.block_size = batch.block_size;
      a.ctx = batch.row_context[r];
      a.skip_from = batch.seq_skip_from.empty() ? a.ctx : batch.seq_skip_from[seq];
      a.skip = batch.seq_skip_from.empty() ? 0 : batch.seq_skip[seq];
      a.heads = heads;
      a.kv_heads = kv_heads;
      a.dim = dim;
      a.scale = scale;
      scores.resize(heads * a.ctx);
      a.scores = scores.data();
      a.acc = acc.data();
      a.out = op + r * heads * dim;
      if (avx2) {
        paged::AttendRowAvx2(a);
      } else {
        AttendRow(a);
      }
    }
  });
  return out;
}

torch::Tensor PagedAttentionReference(const torch::Tensor& q, const torch::Tensor& k_pool,
                                      const torch::Tensor& v_pool, const PagedBatch& batch) {
  const int64_t rows = q.size(0), heads = q.size(1), dim = q.size(2);
  const int64_t kv_heads = k_pool.size(2);
  torch::Tensor k_flat = k_pool.reshape({-1, kv_heads, dim});
  torch::Tensor v_flat = v_pool.reshape({-1, kv_heads, dim});
  std::vector<torch::Tensor> outs;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int64_t> slots;
    for (int64_t t = 0; t < batch.row_context[r]; ++t) {
      slots.push_back(SlotOf(batch, batch.row_seq[r], t));
    }
    torch::Tensor idx = torch::tensor(slots, torch::kLong);
    torch::Tensor k = k_flat.index_select(0, idx).repeat_interleave(heads / kv_heads, 1);
    torch::Tensor v = v_flat.index_select(0, idx).repeat_interleave(heads / kv_heads, 1);
    // [heads, 1, dim] x [heads, dim, ctx]
    torch::Tensor s = torch::matmul(q[r].unsqueeze(1), k.permute({1, 2, 0})) / std::sqrt(dim);
    outs.push_back(torch::matmul(torch::softmax(s, -1), v.permute({1, 0, 2})).squeeze(1));
  }
  return torch::stack(outs);
}

}  // namespace rlforge
