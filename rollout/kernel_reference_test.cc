// The CUDA kernels' CPU references (kernels/reference.h) against the code they stand in for:
// the engine's paged attention and sampler, and the transformers formulas models/ computes
// with libtorch (RMSNorm, RoPE tables with default and llama3 frequencies, SiLU-and-multiply,
// log-softmax). bf16 through libtorch's CPU bf16 ops, which round each op's result as the
// contracts in kernels/kernel_args.h say. The GPU tests compare the kernels with these same
// references, so a kernel that passes there computes what the CPU engine and model compute.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <numeric>
#include <random>
#include <vector>

#include "kernels/reference.h"
#include "models/rope.h"
#include "rollout/paged_attention.h"
#include "rollout/sampler.h"

namespace rlforge {
namespace {

using kernels::DType;

DType DTypeOf(torch::Dtype t) { return t == torch::kFloat32 ? DType::kF32 : DType::kBF16; }

// fp32: equal to rounding; bf16: within vLLM's bf16 tolerance (rtol 1.6e-2, about two units in
// the last place). The references sum in double where torch sums in fp32, and libtorch's
// vectorised exp differs from libm's in the last bits, which can move a bf16 value across a
// rounding boundary.
void ExpectMatches(const torch::Tensor& got, const torch::Tensor& want, const char* what) {
  auto g = got.to(torch::kFloat32).contiguous(), w = want.to(torch::kFloat32).contiguous();
  const bool bf16 = got.scalar_type() == torch::kBFloat16;
  const double rtol = bf16 ? 1.6e-2 : 2e-6, atol = bf16 ? 1e-3 : 1e-6;
  const torch::Tensor excess = (g - w).abs() - (atol + rtol * w.abs());
  const auto at = excess.argmax().item<int64_t>();
  EXPECT_LE(excess.max().item<float>(), 0)
      << what << " (" << got.scalar_type() << ") at " << at << ": got "
      << g.flatten()[at].item<float>() << ", want " << w.flatten()[at].item<float>();
}

TEST(KernelReferenceTest, PagedAttentionMatchesTheEngineKernel) {
  torch::manual_seed(1);
  const int64_t blocks = 24, bs = 4, kv_heads = 2, heads = 8, dim = 16;
  torch::Tensor k = torch::randn({blocks, bs, kv_heads, dim});
  torch::Tensor v = torch::randn({blocks, bs, kv_heads, dim});
  PagedBatch b;
  b.block_size = bs;
  b.tables = {5, 3, 17, 2, 9, 11, 0, 20, 1};
  b.table_start = {0, 3, 5, 9};
  b.seq_skip_from = {100, 2, 100};  // sequence 1: a shared prompt's sample, gap of 2 slots
  b.seq_skip = {0, 2, 0};
  for (auto [seq, ctx] : {std::pair{0, 11}, {1, 5}, {2, 1}, {2, 13}, {2, 14}, {2, 15}}) {
    b.row_seq.push_back(seq);
    b.row_context.push_back(ctx);
    b.row_slot.push_back(0);
  }
  torch::Tensor q = torch::randn({int64_t(b.row_seq.size()), heads, dim});
  torch::Tensor want = PagedAttention(q, k, v, b);
  torch::Tensor got = torch::empty_like(q);
  kernels::PagedAttentionArgs a;
  a.q = q.data_ptr(), a.k_pool = k.data_ptr(), a.v_pool = v.data_ptr(), a.out = got.data_ptr();
  a.row_seq = b.row_seq.data(), a.row_context = b.row_context.data();
  a.tables = b.tables.data(), a.table_start = b.table_start.data();
  a.seq_skip_from = b.seq_skip_from.data(), a.seq_skip = b.seq_skip.data();
  a.rows = int32_t(b.row_seq.size()), a.num_heads = heads, a.num_kv_heads = kv_heads;
  a.head_dim = dim, a.block_size = bs, a.max_context = 15, a.scale = 0.25f;
  kernels::ReferencePagedAttention(a);
  EXPECT_TRUE(torch::allclose(got, want, 1e-5, 1e-5)) << (got - want).abs().max().item<float>();
}

// models/transformer.cc's RMSNorm, with the residual added first as a decoder layer does.
TEST(KernelReferenceTest, RmsNormMatchesTheModel) {
  for (torch::Dtype t : {torch::kFloat32, torch::kBFloat16}) {
    torch::manual_seed(2);
    torch::Tensor x = (torch::randn({5, 96}) * 3).to(t), res = torch::randn({5, 96}).to(t);
    torch::Tensor w = torch::randn({96}).to(t);
    torch::Tensor h = x + res;
    torch::Tensor hf = h.to(torch::kFloat32);
    torch::Tensor want = w * (hf * torch::rsqrt(hf.pow(2).mean(-1, true) + 1e-6)).to(t);
    torch::Tensor got = torch::empty_like(x), got_res = res.clone();
    kernels::RmsNormArgs a;
    a.x = x.data_ptr(), a.residual = got_res.data_ptr(), a.weight = w.data_ptr();
    a.out = got.data_ptr(), a.rows = 5, a.dim = 96, a.eps = 1e-6f, a.dtype = DTypeOf(t);
    kernels::ReferenceRmsNorm(a);
    EXPECT_TRUE(torch::equal(got_res, h));
    ExpectMatches(got, want, "rmsnorm");
  }
}

// transformers' RoPE as models/transformer.cc applies it (RopeTables, ApplyRope), with the
// frequencies of a default and a llama3 rope_scaling from models/rope.h.
TEST(KernelReferenceTest, RopeMatchesTheModelForDefaultAndLlama3Frequencies) {
  models::RopeScaling llama3;
  llama3.type = models::RopeType::kLlama3;
  llama3.factor = 8, llama3.low_freq_factor = 1, llama3.high_freq_factor = 4;
  llama3.original_max_position_embeddings = 8192;
  for (const models::RopeScaling& scaling : {models::RopeScaling{}, llama3}) {
    for (torch::Dtype t : {torch::kFloat32, torch::kBFloat16}) {
      const int64_t dim = 64, rows = 5, heads = 4, kv_heads = 2;
      const models::RopeFrequencies f = models::RopeInverseFrequencies(scaling, 500000, dim);
      torch::Tensor positions = torch::tensor({0L, 1L, 300L, 8000L, 70000L});
      auto freqs = positions.to(torch::kFloat32).unsqueeze(-1) * f.inv_freq;
      auto emb = torch::cat({freqs, freqs}, -1);
      auto cos = (emb.cos() * f.attention_factor).to(t).unsqueeze(1);
      auto sin = (emb.sin() * f.attention_factor).to(t).unsqueeze(1);
      auto apply = [&](const torch::Tensor& x) {
        auto x1 = x.narrow(-1, 0, dim / 2), x2 = x.narrow(-1, dim / 2, dim / 2);
        return x * cos + torch::cat({-x2, x1}, -1) * sin;
      };
      torch::manual_seed(3);
      torch::Tensor q = torch::randn({rows, heads, dim}).to(t);
      torch::Tensor k = torch::randn({rows, kv_heads, dim}).to(t);
      torch::Tensor want_q = apply(q), want_k = apply(k);
      torch::Tensor inv = f.inv_freq.contiguous();
      kernels::RopeArgs a;
      a.q = q.data_ptr(), a.k = k.data_ptr(), a.positions = positions.data_ptr<int64_t>();
      a.inv_freq = inv.data_ptr<float>(), a.rows = rows, a.num_heads = heads;
      a.num_kv_heads = kv_heads, a.head_dim = dim, a.rotary_dim = dim;
      a.attention_factor = static_cast<float>(f.attention_factor), a.dtype = DTypeOf(t);
      kernels::ReferenceRope(a);
      ExpectMatches(q, want_q, models::RopeTypeName(scaling.type));
      ExpectMatches(k, want_k, models::RopeTypeName(scaling.type));
    }
  }
}

TEST(KernelReferenceTest, SiluMulMatchesTheModelsMlp) {
  for (torch::Dtype t : {torch::kFloat32, torch::kBFloat16}) {
    torch::manual_seed(4);
    torch::Tensor x = (torch::randn({3, 2 * 40}) * 3).to(t);
    torch::Tensor want = torch::silu(x.narrow(1, 0, 40)) * x.narrow(1, 40, 40);
    torch::Tensor got = torch::empty({3, 40}, x.options());
    kernels::SiluMulArgs a;
    a.x = x.data_ptr(), a.out = got.data_ptr(), a.rows = 3, a.inner = 40, a.dtype = DTypeOf(t);
    kernels::ReferenceSiluMul(a);
    ExpectMatches(got, want, "silu_mul");
  }
}

TEST(KernelReferenceTest, LogprobIsTheLogSoftmaxAtTheTarget) {
  torch::manual_seed(5);
  torch::Tensor logits = torch::randn({4, 1000}) * 5;
  std::vector<int32_t> targets = {0, 999, 17, 500};
  std::vector<float> got(4);
  kernels::LogprobArgs a;
  a.logits = logits.data_ptr(), a.targets = targets.data(), a.logprobs = got.data();
  a.rows = 4, a.vocab = 1000;
  kernels::ReferenceLogprob(a);
  torch::Tensor lp = torch::log_softmax(logits, -1);
  for (int r = 0; r < 4; ++r) EXPECT_NEAR(got[r], lp[r][targets[r]].item<float>(), 1e-5);
}

// The engine's sampler draws from the distribution SampleCandidates describes: chi-square of
// its draws against those probabilities, for truncations the engine's configs use.
TEST(KernelReferenceTest, TheEnginesSamplerDrawsTheCandidatesDistribution) {
  const std::vector<float> row = {0.3f, -1, 2, 0.9f, 1.4f, -0.2f, 0.1f, 1.1f, -2, 0.6f, 1.7f, 0};
  struct Setting {
    float temperature;
    int32_t top_k;
    float top_p;
  };
  for (Setting s : {Setting{1, 0, 1}, {0.7f, 5, 1}, {1.3f, 0, 0.8f}, {0.8f, 8, 0.9f}}) {
    SamplingParams p;
    p.temperature = s.temperature, p.top_k = s.top_k, p.top_p = s.top_p;
    std::mt19937_64 rng = SampleRng(11, 0);
    std::vector<float> scratch;
    std::vector<int32_t> index;
    std::vector<int32_t> drawn;
    for (int i = 0; i < 20000; ++i) {
      drawn.push_back(SampleToken(row.data(), int64_t(row.size()), p, rng, scratch, index).token);
    }
    const kernels::Candidates c =
        kernels::SampleCandidates(row.data(), int32_t(row.size()), s.temperature, s.top_k, s.top_p);
    EXPECT_LT(kernels::CandidatesChiSquare(drawn, c), 31.3)
        << "T " << s.temperature << " top_k " << s.top_k << " top_p " << s.top_p;
  }
}

}  // namespace
}  // namespace rlforge
