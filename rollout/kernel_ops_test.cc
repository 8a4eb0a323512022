// The libtorch adapter over the kernel library (rollout/kernel_ops.h) on CPU tensors: each op
// against the engine's or the model's own libtorch code, fp32 and bf16, and its argument
// checks by their messages.
#include "rollout/kernel_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/status/status.h"
#include "kernels/reference.h"

namespace rlforge {
namespace {

// vLLM's bf16 tolerance; fp32 to rounding (the references sum in double).
void ExpectClose(const torch::Tensor& got, const torch::Tensor& want, const char* what) {
  auto g = got.to(torch::kFloat32), w = want.to(torch::kFloat32);
  const bool bf16 = got.scalar_type() == torch::kBFloat16;
  EXPECT_TRUE(torch::allclose(g, w, bf16 ? 1.6e-2 : 1e-5, bf16 ? 1e-3 : 1e-5))
      << what << " (" << got.scalar_type() << "): max diff " << (g - w).abs().max().item<float>();
}

void ExpectError(const absl::Status& s, absl::StatusCode code, const std::string& text) {
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_NE(std::string(s.message()).find(text), std::string::npos)
      << "\"" << s.message() << "\" lacks \"" << text << "\"";
}

// Three sequences over a pool of 24 blocks of 4: one with a shared prompt's gap, and rows of
// a decode, a chunk ending mid-block and context 1.
PagedBatch TestBatch() {
  PagedBatch b;
  b.block_size = 4;
  b.tables = {5, 3, 17, 2, 9, 11, 0, 20, 1};
  b.table_start = {0, 3, 5, 9};
  b.seq_skip_from = {100, 2, 100};
  b.seq_skip = {0, 2, 0};
  for (auto [seq, ctx, slot] :
       {std::tuple{0, 11, 70}, {1, 5, 47}, {2, 1, 0}, {2, 13, 80}, {2, 14, 81}, {2, 15, 82}}) {
    b.row_seq.push_back(seq);
    b.row_context.push_back(ctx);
    b.row_slot.push_back(slot);
  }
  return b;
}

// WriteKv then PagedAttention through the adapter against the engine's WritePagedKv and
// PagedAttention (GQA 4, a gap, a context of 1), in fp32 and bf16.
TEST(KernelOpsTest, KvWriteAndPagedAttentionMatchTheEngine) {
  const PagedBatch b = TestBatch();
  const int64_t rows = static_cast<int64_t>(b.row_seq.size()), heads = 8, kv_heads = 2, dim = 16;
  for (torch::Dtype t : {torch::kFloat32, torch::kBFloat16}) {
    torch::manual_seed(1);
    // Round through the dtype first, so both paths see the same values.
    auto make = [&](std::vector<int64_t> shape) { return torch::randn(shape).to(t); };
    torch::Tensor k_pool = make({24, 4, kv_heads, dim}), v_pool = make({24, 4, kv_heads, dim});
    torch::Tensor q = make({rows, heads, dim}), k = make({rows, kv_heads, dim});
    torch::Tensor v = make({rows, kv_heads, dim});
    torch::Tensor want_k = k_pool.to(torch::kFloat32), want_v = v_pool.to(torch::kFloat32);
    WritePagedKv(want_k, k.to(torch::kFloat32), b);
    WritePagedKv(want_v, v.to(torch::kFloat32), b);
    torch::Tensor want = PagedAttention(q.to(torch::kFloat32), want_k, want_v, b);

    absl::StatusOr<kernel_ops::PagedIndex> index = kernel_ops::ToDevice(b, torch::kCPU);
    ASSERT_TRUE(index.ok()) << index.status();
    EXPECT_EQ(index->max_context, 15);
    ASSERT_TRUE(kernel_ops::WriteKv(k, v, index->row_slot, k_pool, v_pool).ok());
    EXPECT_TRUE(torch::equal(k_pool.to(torch::kFloat32), want_k));  // pure copies
    EXPECT_TRUE(torch::equal(v_pool.to(torch::kFloat32), want_v));
    absl::StatusOr<torch::Tensor> got =
        kernel_ops::PagedAttention(q, k_pool, v_pool, *index, 1.0f / std::sqrt(float(dim)));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->scalar_type(), t);
    ExpectClose(*got, want, "paged attention");
  }
}

kernel_ops::SampleSettings Settings(std::vector<float> temperature, std::vector<int32_t> top_k,
                                    std::vector<float> top_p, std::vector<int64_t> seeds,
                                    std::vector<int64_t> steps) {
  kernel_ops::SampleSettings s;
  s.temperature = torch::tensor(temperature, torch::kFloat32);
  s.top_k = torch::tensor(top_k, torch::kInt32), s.top_p = torch::tensor(top_p, torch::kFloat32);
  s.seeds = torch::tensor(seeds, torch::kInt64), s.steps = torch::tensor(steps, torch::kInt64);
  return s;
}

// Greedy rows take the argmax, top_k 1 too; a sampled row draws a candidate of its top-k and
// top-p; every row's logprob is the untempered log-softmax at its token; a row's draw depends on
// its seed and step, not on its neighbours.
TEST(KernelOpsTest, SampleDrawsCandidatesWithUntemperedLogprobs) {
  for (torch::Dtype t : {torch::kFloat32, torch::kBFloat16}) {
    torch::manual_seed(3);
    torch::Tensor logits = (torch::randn({4, 300}) * 3).to(t);
    const kernel_ops::SampleSettings settings =
        Settings({0, 1, 0.7f, 2}, {0, 1, 10, 0}, {1, 1, 1, 0.8f}, {1, 2, -3, 4}, {0, 5, 6, 7});
    absl::StatusOr<kernel_ops::SampledRows> got = kernel_ops::Sample(logits, settings);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->tokens.scalar_type(), torch::kInt32);
    torch::Tensor lp = torch::log_softmax(logits.to(torch::kFloat32), -1);
    torch::Tensor argmax = lp.argmax(1);
    EXPECT_EQ(got->tokens[0].item<int64_t>(), argmax[0].item<int64_t>()) << t;
    EXPECT_EQ(got->tokens[1].item<int64_t>(), argmax[1].item<int64_t>()) << t;
    const torch::Tensor raw = logits.to(torch::kFloat32).contiguous();
    const float* row2 = raw[2].data_ptr<float>();
    const float* row3 = raw[3].data_ptr<float>();
    const kernels::Candidates top10 = kernels::SampleCandidates(row2, 300, 0.7f, 10, 1);
    const kernels::Candidates nucleus = kernels::SampleCandidates(row3, 300, 2, 0, 0.8f);
    auto has = [](const kernels::Candidates& c, int32_t id) {
      return std::find(c.tokens.begin(), c.tokens.end(), id) != c.tokens.end();
    };
    EXPECT_TRUE(has(top10, got->tokens[2].item<int32_t>())) << t;
    EXPECT_TRUE(has(nucleus, got->tokens[3].item<int32_t>())) << t;
    torch::Tensor want = lp.gather(1, got->tokens.to(torch::kLong).unsqueeze(1)).squeeze(1);
    EXPECT_TRUE(torch::allclose(got->logprobs, want, 1e-5, 1e-5)) << t;

    kernel_ops::SampleSettings last_only = Settings({2}, {0}, {0.8f}, {4}, {7});
    absl::StatusOr<kernel_ops::SampledRows> alone =
        kernel_ops::Sample(logits.narrow(0, 3, 1).contiguous(), last_only);
    ASSERT_TRUE(alone.ok()) << alone.status();
    EXPECT_EQ(alone->tokens[0].item<int32_t>(), got->tokens[3].item<int32_t>()) << t;
  }
}

// The model's RMSNorm after a residual add, SiLU-and-multiply and RoPE (transformers' forms).
TEST(KernelOpsTest, NormActivationAndRopeMatchTheModelsFormulas) {
  for (torch::Dtype t : {torch::kFloat32, torch::kBFloat16}) {
    torch::manual_seed(3);
    torch::Tensor x = (torch::randn({4, 48}) * 2).to(t), res = torch::randn({4, 48}).to(t);
    torch::Tensor w = torch::randn({48}).to(t);
    torch::Tensor h = x + res, hf = h.to(torch::kFloat32);
    torch::Tensor want = w * (hf * torch::rsqrt(hf.pow(2).mean(-1, true) + 1e-6)).to(t);
    absl::StatusOr<torch::Tensor> normed = kernel_ops::RmsNorm(x, &res, w, 1e-6f);
    ASSERT_TRUE(normed.ok()) << normed.status();
    EXPECT_TRUE(torch::equal(res, h));
    ExpectClose(*normed, want, "rmsnorm");

    torch::Tensor gate_up = (torch::randn({3, 64}) * 3).to(t);
    absl::StatusOr<torch::Tensor> act = kernel_ops::SiluMul(gate_up);
    ASSERT_TRUE(act.ok()) << act.status();
    ExpectClose(*act, torch::silu(gate_up.narrow(1, 0, 32)) * gate_up.narrow(1, 32, 32), "silu");

    const int64_t dim = 16;
    torch::Tensor inv_freq =
        torch::pow(10000.0, -torch::arange(0, dim, 2).to(torch::kFloat32) / dim);
    torch::Tensor positions = torch::tensor({0L, 5L, 130L});
    torch::Tensor q = torch::randn({3, 4, dim}).to(t), k = torch::randn({3, 2, dim}).to(t);
    auto freqs = positions.to(torch::kFloat32).unsqueeze(-1) * inv_freq;
    auto emb = torch::cat({freqs, freqs}, -1);
    auto cos = emb.cos().to(t).unsqueeze(1), sin = emb.sin().to(t).unsqueeze(1);
    auto rotate = [&](const torch::Tensor& y) {
      auto y1 = y.narrow(-1, 0, dim / 2), y2 = y.narrow(-1, dim / 2, dim / 2);
      return y * cos + torch::cat({-y2, y1}, -1) * sin;
    };
    torch::Tensor want_q = rotate(q), want_k = rotate(k);
    ASSERT_TRUE(kernel_ops::Rope(q, k, positions, inv_freq, 1.0f).ok());
    ExpectClose(q, want_q, "rope q");
    ExpectClose(k, want_k, "rope k");
  }
}

// HiddenIncremental with the kernels' RMSNorm (residual fused), RoPE and SiLU-and-multiply
// against its libtorch steps: Llama with default RoPE, Qwen3 (q/k norms) with llama3 RoPE, and
// dynamic NTK (whose RoPE stays in libtorch), in fp32 and bf16.
TEST(KernelOpsTest, ModelForwardThroughTheKernelsMatchesItsLibtorchSteps) {
  models::RopeScaling llama3, dynamic;
  llama3.type = models::RopeType::kLlama3;
  llama3.factor = 8, llama3.low_freq_factor = 1, llama3.high_freq_factor = 4;
  llama3.original_max_position_embeddings = 64;
  dynamic.type = models::RopeType::kDynamic, dynamic.factor = 2;
  struct Case {
    const char* architecture;
    models::RopeScaling rope;
  };
  const models::TransformerImpl::IncrementalKernels kernels = kernel_ops::ModelKernels();
  for (const Case& k : {Case{"LlamaForCausalLM", {}}, Case{"Qwen3ForCausalLM", llama3},
                        Case{"LlamaForCausalLM", dynamic}}) {
    for (torch::Dtype t : {torch::kFloat32, torch::kBFloat16}) {
      SCOPED_TRACE(testing::Message()
                   << k.architecture << " " << models::RopeTypeName(k.rope.type) << " " << t);
      models::TransformerConfig c;
      c.architecture = k.architecture;
      c.vocab_size = 50, c.hidden_size = 32, c.intermediate_size = 40, c.num_hidden_layers = 2;
      c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 16;
      c.max_position_embeddings = 64, c.rope_scaling = k.rope;
      torch::manual_seed(4);
      models::Transformer m(c);
      torch::NoGradGuard no_grad;
      torch::Tensor tokens = torch::randint(50, {70}), positions = torch::arange(70);
      auto attend = [&](int64_t, const torch::Tensor& q, const torch::Tensor& key,
                        const torch::Tensor& v) { return m->ContiguousAttention(q, key, v); };
      // bf16: the weights rounded from the fp32 model's, whose forward is the yardstick.
      const torch::Tensor exact = m->HiddenIncremental(tokens, positions, attend);
      m->to(t);
      torch::Tensor want = m->HiddenIncremental(tokens, positions, attend);
      torch::Tensor got = m->HiddenIncremental(tokens, positions, attend, &kernels);
      EXPECT_EQ(got.scalar_type(), t);
      if (t == torch::kFloat32) {
        ExpectClose(got, want, "hidden");
        continue;
      }
      // Over two layers, bf16 roundings that differ by an ulp (a sum in double, not float)
      // spread: the kernels' forward must be as close to the fp32 one as libtorch's bf16 is.
      const float kernel_err = (got.to(torch::kFloat32) - exact).abs().max().item<float>();
      const float torch_err = (want.to(torch::kFloat32) - exact).abs().max().item<float>();
      EXPECT_LE(kernel_err, 1.25f * torch_err) << "libtorch's bf16 error " << torch_err;
    }
  }
}

TEST(KernelOpsTest, BadArgumentsAreNamed) {
  const PagedBatch b = TestBatch();
  kernel_ops::PagedIndex index = *kernel_ops::ToDevice(b, torch::kCPU);
  torch::Tensor pool = torch::zeros({24, 4, 2, 16});
  torch::Tensor q = torch::randn({6, 8, 16});
  const auto bad = absl::StatusCode::kInvalidArgument;
  ExpectError(kernel_ops::PagedAttention(q.to(torch::kInt32), pool, pool, index, 1).status(), bad,
              "kernel_ops::PagedAttention: q: expected dtype Float or BFloat16, got Int");
  ExpectError(kernel_ops::PagedAttention(q.to(torch::kBFloat16), pool, pool, index, 1).status(),
              bad, "kernel_ops::PagedAttention: k_pool: expected dtype BFloat16, got Float");
  ExpectError(kernel_ops::PagedAttention(torch::randn({6, 8, 8}), pool, pool, index, 1).status(),
              bad, "k_pool: expected shape [*, 4, *, 8], got [24, 4, 2, 16]");
  ExpectError(kernel_ops::PagedAttention(q.transpose(0, 1), pool, pool, index, 1).status(), bad,
              "q: expected a contiguous tensor");
  ExpectError(kernel_ops::PagedAttention(torch::randn({6, 3, 16}), pool, pool, index, 1).status(),
              bad, "q has 3 heads, not a multiple of the pools' 2 kv heads");
  ExpectError(kernel_ops::PagedAttention(q.narrow(0, 0, 5), pool, pool, index, 1).status(), bad,
              "index.row_seq: expected shape [5], got [6]");
  ExpectError(kernel_ops::PagedAttention(q, pool, pool.to(torch::kMeta), index, 1).status(), bad,
              "v_pool: expected on cpu (the first tensor's device), got meta");
  torch::Tensor k = torch::randn({6, 2, 16});
  ExpectError(kernel_ops::WriteKv(k, k, index.row_slot.to(torch::kInt32), pool, pool), bad,
              "kernel_ops::WriteKv: slots: expected dtype Long, got Int");
  kernel_ops::SampleSettings settings = Settings({1, 1}, {0, 0}, {1, 1}, {1, 2}, {0, 0});
  settings.seeds = settings.seeds.to(torch::kInt32);
  ExpectError(kernel_ops::Sample(torch::randn({2, 9}), settings).status(), bad,
              "kernel_ops::Sample: seeds: expected dtype Long, got Int");
  ExpectError(kernel_ops::Sample(torch::randn({3, 9}), settings).status(), bad,
              "kernel_ops::Sample: temperature: expected shape [3], got [2]");
  ExpectError(kernel_ops::SiluMul(torch::randn({2, 9})).status(), bad,
              "x: expected an even last dimension (gate, then up), got [2, 9]");
  torch::Tensor meta = torch::empty({2, 8}, torch::kMeta);
  ExpectError(kernel_ops::SiluMul(meta).status(), absl::StatusCode::kFailedPrecondition,
              "kernel_ops::SiluMul: tensors on meta: the kernels run on CPU and CUDA tensors only");

  PagedBatch broken = b;
  broken.row_slot.pop_back();
  ExpectError(kernel_ops::ToDevice(broken, torch::kCPU).status(), bad,
              "inconsistent PagedBatch: 6 row_seq, 6 row_context, 5 row_slot");
}

// Where CUDA tensors cannot go through the kernels, the reason says why (a CPU libtorch here).
TEST(KernelOpsTest, CudaUnavailableReasonSaysWhy) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a CUDA device is available";
  const std::string why = kernel_ops::CudaUnavailableReason();
  EXPECT_FALSE(why.empty());
  EXPECT_TRUE(why.find("libtorch has no CUDA") != std::string::npos ||
              why.find("no CUDA kernel library") != std::string::npos ||
              why.find("no usable CUDA device") != std::string::npos)
      << why;
}

}  // namespace
}  // namespace rlforge
