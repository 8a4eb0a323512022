#include "rollout/paged_attention.h"

#include <gtest/gtest.h>

#include <numeric>
#include <random>

namespace rlforge {
namespace {

// Random pool and a batch mixing decode rows and a prefill chunk, with block
// tables scattered over the pool.
struct Case {
  torch::Tensor q, k_pool, v_pool;
  PagedBatch batch;
};

Case MakeCase(int64_t heads, int64_t kv_heads, int64_t dim, uint64_t seed) {
  torch::manual_seed(seed);
  const int64_t num_blocks = 32, bs = 4;
  Case c;
  c.k_pool = torch::randn({num_blocks, bs, kv_heads, dim});
  c.v_pool = torch::randn({num_blocks, bs, kv_heads, dim});
  std::vector<int32_t> perm(num_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937 rng(seed);
  std::shuffle(perm.begin(), perm.end(), rng);
  c.batch.block_size = bs;
  c.batch.table_start = {0};
  const std::vector<int> lens = {1, 7, 13, 5};
  size_t next = 0;
  for (size_t s = 0; s < lens.size(); ++s) {
    for (int b = 0; b < (lens[s] + bs - 1) / bs; ++b) c.batch.tables.push_back(perm[next++]);
    c.batch.table_start.push_back(static_cast<int32_t>(c.batch.tables.size()));
  }
  // Sequences 0, 1, 3 decode their last position; sequence 2 prefills positions 6..12.
  auto add_row = [&](int seq, int pos) {
    c.batch.row_seq.push_back(seq);
    c.batch.row_context.push_back(pos + 1);
    const int32_t* t = c.batch.tables.data() + c.batch.table_start[seq];
    c.batch.row_slot.push_back(int64_t(t[pos / bs]) * bs + pos % bs);
  };
  add_row(0, 0);
  add_row(1, 6);
  for (int p = 6; p < 13; ++p) add_row(2, p);
  add_row(3, 4);
  c.q = torch::randn({int64_t(c.batch.row_seq.size()), heads, dim});
  return c;
}

// Every build of the row kernel this CPU can run, not only the one kAuto picks here.
std::vector<PagedKernel> RunnableKernels() {
  std::vector<PagedKernel> out = {PagedKernel::kAuto, PagedKernel::kBaseline};
  if (PagedKernelAvailable(PagedKernel::kAvx2)) out.push_back(PagedKernel::kAvx2);
  return out;
}

TEST(PagedAttention, MatchesReferenceWithGroupedQueryHeads) {
  for (PagedKernel kernel : RunnableKernels()) {
    for (auto [heads, kv_heads, dim] : {std::tuple{4, 2, 16}, {4, 4, 8}, {6, 1, 12}}) {
      Case c = MakeCase(heads, kv_heads, dim, 1 + heads * dim);
      torch::Tensor got = PagedAttention(c.q, c.k_pool, c.v_pool, c.batch, kernel);
      torch::Tensor want = PagedAttentionReference(c.q, c.k_pool, c.v_pool, c.batch);
      EXPECT_TRUE(torch::allclose(got, want, 1e-5, 1e-5))
          << "kernel " << static_cast<int>(kernel) << " heads " << heads << " kv " << kv_heads
          << " max diff " << (got - want).abs().max().item<float>();
    }
  }
}

TEST(PagedAttention, BaselineAndAvx2BuildsAgreeToRounding) {
  if (!PagedKernelAvailable(PagedKernel::kAvx2)) GTEST_SKIP() << "no AVX2 + FMA here";
  Case c = MakeCase(4, 2, 16, 11);
  torch::Tensor base = PagedAttention(c.q, c.k_pool, c.v_pool, c.batch, PagedKernel::kBaseline);
  torch::Tensor avx2 = PagedAttention(c.q, c.k_pool, c.v_pool, c.batch, PagedKernel::kAvx2);
  EXPECT_TRUE(torch::allclose(base, avx2, 1e-6, 1e-6))
      << "max diff " << (base - avx2).abs().max().item<float>();
}

TEST(PagedAttention, WriteLandsInTheMappedSlots) {
  Case c = MakeCase(2, 2, 4, 3);
  torch::Tensor kv = torch::randn({int64_t(c.batch.row_slot.size()), 2, 4});
  WritePagedKv(c.k_pool, kv, c.batch);
  torch::Tensor flat = c.k_pool.reshape({-1, 2, 4});
  for (size_t r = 0; r < c.batch.row_slot.size(); ++r) {
    EXPECT_TRUE(torch::equal(flat[c.batch.row_slot[r]], kv[r])) << "row " << r;
  }
}

TEST(PagedAttention, DecodeMatchesDenseCausalAttention) {
  // One sequence of 9 tokens laid out in blocks 5, 2, 7: the last row must see all 9.
  torch::manual_seed(4);
  const int64_t bs = 4, heads = 2, dim = 8;
  torch::Tensor k = torch::randn({9, heads, dim}), v = torch::randn({9, heads, dim});
  torch::Tensor k_pool = torch::zeros({8, bs, heads, dim}), v_pool = torch::zeros_like(k_pool);
  PagedBatch b;
  b.block_size = bs;
  b.tables = {5, 2, 7};
  b.table_start = {0, 3};
  for (int p = 0; p < 9; ++p) {
    b.row_seq.push_back(0);
    b.row_context.push_back(p + 1);
    b.row_slot.push_back(int64_t(b.tables[p / bs]) * bs + p % bs);
  }
  WritePagedKv(k_pool, k, b);
  WritePagedKv(v_pool, v, b);
  torch::Tensor q = torch::randn({9, heads, dim});
  torch::Tensor got = PagedAttention(q, k_pool, v_pool, b);
  torch::Tensor s = torch::matmul(q.transpose(0, 1), k.permute({1, 2, 0})) / std::sqrt(dim);
  s = s.masked_fill(torch::ones({9, 9}).triu(1).to(torch::kBool), -1e30);
  torch::Tensor want = torch::matmul(torch::softmax(s, -1), v.transpose(0, 1)).transpose(0, 1);
  EXPECT_TRUE(torch::allclose(got, want, 1e-5, 1e-5));
}

// A sample of a shared 6-token prompt (blocks 5 and 2, the second half full)
// continues in block 7 from slot index 8: positions 6.. skip the 2 unused
// slots of the shared block. Attention must still see positions 0..p densely.
TEST(PagedAttention, GapAfterASharedPartialBlockIsSkipped) {
  torch::manual_seed(6);
  const int64_t bs = 4, heads = 4, kv_heads = 2, dim = 8, len = 11;
  torch::Tensor k = torch::randn({len, kv_heads, dim}), v = torch::randn({len, kv_heads, dim});
  torch::Tensor k_pool = torch::full({8, bs, kv_heads, dim}, 1e3f);  // garbage in unused slots
  torch::Tensor v_pool = torch::full_like(k_pool, -1e3f);
  PagedBatch b;
  b.block_size = bs;
  b.tables = {5, 2, 7};
  b.table_start = {0, 3};
  b.seq_skip_from = {6};
  b.seq_skip = {2};
  for (int p = 0; p < len; ++p) {
    const int u = p < 6 ? p : p + 2;
    b.row_seq.push_back(0);
    b.row_context.push_back(p + 1);
    b.row_slot.push_back(int64_t(b.tables[u / bs]) * bs + u % bs);
  }
  WritePagedKv(k_pool, k, b);
  WritePagedKv(v_pool, v, b);
  EXPECT_EQ(k_pool[2][2][0][0].item<float>(), 1e3f) << "the gap must stay unwritten";
  torch::Tensor q = torch::randn({len, heads, dim});
  torch::Tensor kk = k.repeat_interleave(heads / kv_heads, 1),
                vv = v.repeat_interleave(heads / kv_heads, 1);
  torch::Tensor s = torch::matmul(q.transpose(0, 1), kk.permute({1, 2, 0})) / std::sqrt(dim);
  s = s.masked_fill(torch::ones({len, len}).triu(1).to(torch::kBool), -1e30);
  torch::Tensor want = torch::matmul(torch::softmax(s, -1), vv.transpose(0, 1)).transpose(0, 1);
  for (PagedKernel kernel : RunnableKernels()) {
    torch::Tensor got = PagedAttention(q, k_pool, v_pool, b, kernel);
    EXPECT_TRUE(torch::allclose(got, want, 1e-5, 1e-5))
        << "kernel " << static_cast<int>(kernel) << " max diff "
        << (got - want).abs().max().item<float>();
  }
  EXPECT_TRUE(torch::allclose(PagedAttentionReference(q, k_pool, v_pool, b), want, 1e-5, 1e-5));
}

}  // namespace
}  // namespace rlforge
