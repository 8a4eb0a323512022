#include "rollout/paged_attention.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <cstring>

#include "common/check.h"

namespace rlforge {

namespace {

// Dot product with independent partial sums, so the compiler vectorises it.
inline float Dot(const float* a, const float* b, int64_t n) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) s[j] += a[i + j] * b[i + j];
  }
  float tail = 0;
  for (; i < n; ++i) tail += a[i] * b[i];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7])) + tail;
}

inline int64_t SlotOf(const PagedBatch& b, int32_t seq, int64_t pos) {
  const int32_t* table = b.tables.data() + b.table_start[seq];
  return static_cast<int64_t>(table[pos / b.block_size]) * b.block_size + pos % b.block_size;
}

}  // namespace

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
                             const torch::Tensor& v_pool, const PagedBatch& batch) {
  torch::Tensor q = q_in.contiguous();
  const int64_t rows = q.size(0), heads = q.size(1), dim = q.size(2);
  const int64_t kv_heads = k_pool.size(2);
  RF_CHECK(k_pool.size(3) == dim && heads % kv_heads == 0);
  RF_CHECK(static_cast<int64_t>(batch.row_seq.size()) == rows);
  const int64_t group = heads / kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  torch::Tensor out = torch::empty_like(q);
  const float* qp = q.data_ptr<float>();
  const float* kp = k_pool.data_ptr<float>();
  const float* vp = v_pool.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t slot_stride = kv_heads * dim;

  // One work item: one query row and one kv head (its `group` query heads
  // share every K and V read).
  at::parallel_for(0, rows * kv_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    std::vector<float> acc(group * dim);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t r = item / kv_heads, g = item % kv_heads;
      const int32_t seq = batch.row_seq[r];
      const int64_t ctx = batch.row_context[r];
      scores.resize(group * ctx);
      for (int64_t t = 0; t < ctx; ++t) {
        const float* k = kp + SlotOf(batch, seq, t) * slot_stride + g * dim;
        for (int64_t h = 0; h < group; ++h) {
          const float* qh = qp + (r * heads + g * group + h) * dim;
          scores[h * ctx + t] = Dot(qh, k, dim) * scale;
        }
      }
      for (int64_t h = 0; h < group; ++h) {
        float* s = scores.data() + h * ctx;
        float m = s[0];
        for (int64_t t = 1; t < ctx; ++t) m = std::max(m, s[t]);
        float sum = 0;
        for (int64_t t = 0; t < ctx; ++t) sum += s[t] = std::exp(s[t] - m);
        const float inv = 1.0f / sum;
        for (int64_t t = 0; t < ctx; ++t) s[t] *= inv;
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t t = 0; t < ctx; ++t) {
        const float* v = vp + SlotOf(batch, seq, t) * slot_stride + g * dim;
        for (int64_t h = 0; h < group; ++h) {
          const float w = scores[h * ctx + t];
          float* a = acc.data() + h * dim;
          for (int64_t i = 0; i < dim; ++i) a[i] += w * v[i];
        }
      }
      for (int64_t h = 0; h < group; ++h) {
        std::memcpy(op + (r * heads + g * group + h) * dim, acc.data() + h * dim,
                    dim * sizeof(float));
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
