// Every CUDA kernel against its CPU reference (kernels/reference.h) on random inputs, fp32
// and bf16, with vLLM's tolerances (bf16: atol 1e-3, rtol 1.6e-2; fp32 tighter). Attention
// covers context length 1, lengths ending mid-block, long contexts split over partitions,
// prefill chunks, a shared prompt's gap, head dims 64 / 128 / 256, GQA ratios 1 / 4 / 8 and
// two block sizes, with every unused pool slot NaN. Without a usable GPU each test skips,
// saying why.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/bfloat16.h"
#include "kernels/cuda_kernels.h"
#include "kernels/reference.h"

namespace rlforge::kernels {
namespace {

std::string NoGpuReason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return "no usable CUDA device (" + cuda::ErrorText(e) + ")";
  if (n == 0) return "no CUDA device";
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return "cannot read device 0's properties";
  if (prop.major < 9) {  // sm_90 code runs on compute capability 9.x and later only
    return std::string(prop.name) + " is compute capability " + std::to_string(prop.major) + "." +
           std::to_string(prop.minor) + "; the kernels are built for sm_90";
  }
  return "";
}

#define REQUIRE_GPU()                                          \
  do {                                                         \
    if (const std::string why = NoGpuReason(); !why.empty()) { \
      GTEST_SKIP() << why;                                     \
    }                                                          \
  } while (0)

#define ASSERT_CUDA(expr)                                     \
  do {                                                        \
    const int e_ = static_cast<int>(expr);                    \
    ASSERT_EQ(e_, 0) << #expr << ": " << cuda::ErrorText(e_); \
  } while (0)

// Host bytes of `values` in dtype d (bf16 rounded to nearest even).
std::vector<char> Encode(const std::vector<float>& values, DType d) {
  std::vector<char> out(values.size() * DTypeBytes(d));
  for (size_t i = 0; i < values.size(); ++i) StoreElement(out.data(), i, d, values[i]);
  return out;
}

std::vector<float> Decode(const std::vector<char>& bytes, DType d) {
  std::vector<float> out(bytes.size() / DTypeBytes(d));
  for (size_t i = 0; i < out.size(); ++i) out[i] = LoadElement(bytes.data(), i, d);
  return out;
}

// Device memory holding a copy of a host vector; freed with the object.
class DeviceBuffer {
 public:
  template <typename V>
  explicit DeviceBuffer(const std::vector<V>& host) : bytes_(host.size() * sizeof(V)) {
    if (cudaMalloc(&ptr_, std::max<size_t>(bytes_, 1)) != cudaSuccess) ptr_ = nullptr;
    if (ptr_ && bytes_) cudaMemcpy(ptr_, host.data(), bytes_, cudaMemcpyHostToDevice);
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  template <typename V = char>
  V* get() const {
    return static_cast<V*>(ptr_);
  }
  template <typename V>
  std::vector<V> Download() const {
    std::vector<V> host(bytes_ / sizeof(V));
    cudaMemcpy(host.data(), ptr_, bytes_, cudaMemcpyDeviceToHost);
    return host;
  }

 private:
  size_t bytes_;
  void* ptr_ = nullptr;
};

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, DType d,
                 const std::string& what) {
  const double atol = d == DType::kBF16 ? 1e-3 : 2e-5, rtol = d == DType::kBF16 ? 1.6e-2 : 1e-4;
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    if (!(std::abs(got[i] - want[i]) <= atol + rtol * std::abs(want[i]))) {
      ADD_FAILURE() << what << " [" << i << "]: got " << got[i] << ", want " << want[i];
      ++bad;
    }
  }
}

std::vector<float> Random(size_t n, std::mt19937& rng, float scale = 1) {
  std::normal_distribution<float> dist(0, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// A batch of sequences over a shuffled pool of blocks: a decode row per sequence, a prefill
// chunk of 6 rows ending sequence 0, and sequence 1 (when there) a shared prompt's sample
// whose positions from 3 on sit 2 slots further on.
struct PagedCase {
  std::vector<int32_t> row_seq, row_context, tables, table_start{0};
  std::vector<int64_t> skip_from, skip, used_slots;
  int32_t num_blocks = 0, max_context = 0;
};

PagedCase MakePagedCase(const std::vector<int32_t>& lengths, int32_t block_size,
                        std::mt19937& rng) {
  PagedCase c;
  std::vector<int32_t> blocks_needed;
  for (size_t s = 0; s < lengths.size(); ++s) {
    const bool gap = s == 1 && lengths[s] > 3;
    c.skip_from.push_back(gap ? 3 : std::numeric_limits<int64_t>::max());
    c.skip.push_back(gap ? 2 : 0);
    blocks_needed.push_back((lengths[s] + c.skip.back() + block_size - 1) / block_size);
    c.num_blocks += blocks_needed.back();
  }
  c.num_blocks += 3;  // blocks no sequence uses
  std::vector<int32_t> ids(c.num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  size_t next = 0;
  for (size_t s = 0; s < lengths.size(); ++s) {
    for (int32_t b = 0; b < blocks_needed[s]; ++b) c.tables.push_back(ids[next++]);
    c.table_start.push_back(static_cast<int32_t>(c.tables.size()));
    for (int32_t p = 0; p < lengths[s]; ++p) {
      c.used_slots.push_back(
          PagedSlot(c.tables.data() + c.table_start[s], block_size, p, c.skip_from[s], c.skip[s]));
    }
    c.row_seq.push_back(static_cast<int32_t>(s));
    c.row_context.push_back(lengths[s]);
    c.max_context = std::max(c.max_context, lengths[s]);
  }
  for (int32_t p = std::max(1, lengths[0] - 6); p < lengths[0]; ++p) {
    c.row_seq.push_back(0);
    c.row_context.push_back(p);
  }
  return c;
}

struct AttentionShape {
  int32_t head_dim, kv_heads, gqa, block_size;
};

void CheckAttention(const AttentionShape& shape, DType d, const std::vector<int32_t>& lengths) {
  std::mt19937 rng(shape.head_dim * 131 + shape.gqa * 17 + shape.block_size);
  const PagedCase c = MakePagedCase(lengths, shape.block_size, rng);
  const int32_t heads = shape.kv_heads * shape.gqa, rows = static_cast<int32_t>(c.row_seq.size());
  const int64_t width = int64_t{shape.kv_heads} * shape.head_dim;
  std::vector<float> k(int64_t{c.num_blocks} * shape.block_size * width,
                       std::numeric_limits<float>::quiet_NaN());
  std::vector<float> v = k;
  for (int64_t slot : c.used_slots) {
    for (int64_t i = 0; i < width; ++i) {
      k[slot * width + i] = std::normal_distribution<float>()(rng);
      v[slot * width + i] = std::normal_distribution<float>()(rng);
    }
  }
  const std::vector<char> q = Encode(Random(int64_t{rows} * heads * shape.head_dim, rng), d);
  const std::vector<char> kb = Encode(k, d), vb = Encode(v, d);
  PagedAttentionArgs a;
  a.rows = rows, a.num_heads = heads, a.num_kv_heads = shape.kv_heads;
  a.head_dim = shape.head_dim, a.block_size = shape.block_size, a.max_context = c.max_context;
  a.scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim)), a.dtype = d;
  std::vector<char> want(q.size());
  PagedAttentionArgs host = a;
  host.q = q.data(), host.k_pool = kb.data(), host.v_pool = vb.data(), host.out = want.data();
  host.row_seq = c.row_seq.data(), host.row_context = c.row_context.data();
  host.tables = c.tables.data(), host.table_start = c.table_start.data();
  host.seq_skip_from = c.skip_from.data(), host.seq_skip = c.skip.data();
  ReferencePagedAttention(host);

  DeviceBuffer dq(q), dk(kb), dv(vb), dout(want), seq(c.row_seq), ctx(c.row_context);
  DeviceBuffer tables(c.tables), start(c.table_start), from(c.skip_from), skip(c.skip);
  DeviceBuffer ws(std::vector<char>(cuda::PagedAttentionWorkspaceBytes(a)));
  a.q = dq.get(), a.k_pool = dk.get(), a.v_pool = dv.get(), a.out = dout.get();
  a.row_seq = seq.get<int32_t>(), a.row_context = ctx.get<int32_t>();
  a.tables = tables.get<int32_t>(), a.table_start = start.get<int32_t>();
  a.seq_skip_from = from.get<int64_t>(), a.seq_skip = skip.get<int64_t>();
  ASSERT_CUDA(cuda::LaunchPagedAttention(a, ws.get(), nullptr));
  ASSERT_CUDA(cudaDeviceSynchronize());
  ExpectClose(Decode(dout.Download<char>(), d), Decode(want, d), d,
              std::string(DTypeName(d)) + " head_dim " + std::to_string(shape.head_dim) + " gqa " +
                  std::to_string(shape.gqa) + " block " + std::to_string(shape.block_size));
}

class PagedAttentionGpuTest : public testing::TestWithParam<std::tuple<AttentionShape, DType>> {};

TEST_P(PagedAttentionGpuTest, MatchesTheReference) {
  REQUIRE_GPU();
  const auto& [shape, d] = GetParam();
  // Lengths: 1; ending mid-block; three partitions (1100 > 2 * 512); a shared prompt's gap.
  CheckAttention(shape, d, {37, 29, 1, 1100});
}

std::string ShapeName(const testing::TestParamInfo<PagedAttentionGpuTest::ParamType>& info) {
  const AttentionShape& s = std::get<0>(info.param);
  return "HeadDim" + std::to_string(s.head_dim) + "KvHeads" + std::to_string(s.kv_heads) + "Gqa" +
         std::to_string(s.gqa) + "Block" + std::to_string(s.block_size) +
         DTypeName(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, PagedAttentionGpuTest,
    testing::Combine(testing::Values(AttentionShape{64, 2, 1, 16}, AttentionShape{128, 2, 4, 16},
                                     AttentionShape{128, 1, 8, 5}, AttentionShape{256, 2, 4, 16},
                                     AttentionShape{64, 2, 8, 32}),
                     testing::Values(DType::kF32, DType::kBF16)),
    ShapeName);

TEST(KvWriteGpuTest, CopiesEachRowToItsSlotAndNothingElse) {
  REQUIRE_GPU();
  for (DType d : {DType::kF32, DType::kBF16}) {
    std::mt19937 rng(3);
    const int32_t rows = 5, width = 2 * 64, slots = 40;
    const std::vector<char> k = Encode(Random(rows * width, rng), d);
    const std::vector<char> v = Encode(Random(rows * width, rng), d);
    const std::vector<char> pool = Encode(Random(int64_t{slots} * width, rng), d);
    std::vector<int64_t> where = {7, 0, 39, 16, 17};
    std::vector<char> want_k = pool, want_v = pool;
    KvWriteArgs a;
    a.rows = rows, a.num_kv_heads = 2, a.head_dim = 64, a.dtype = d;
    KvWriteArgs host = a;
    host.k = k.data(), host.v = v.data(), host.k_pool = want_k.data();
    host.v_pool = want_v.data(), host.slots = where.data();
    ReferenceKvWrite(host);
    DeviceBuffer dk(k), dv(v), kp(pool), vp(pool), ds(where);
    a.k = dk.get(), a.v = dv.get(), a.k_pool = kp.get(), a.v_pool = vp.get();
    a.slots = ds.get<int64_t>();
    ASSERT_CUDA(cuda::LaunchKvWrite(a, nullptr));
    ASSERT_CUDA(cudaDeviceSynchronize());
    EXPECT_EQ(kp.Download<char>(), want_k);
    EXPECT_EQ(vp.Download<char>(), want_v);
  }
}

TEST(RmsNormGpuTest, MatchesTheReferenceWithAndWithoutResidual) {
  REQUIRE_GPU();
  for (DType d : {DType::kF32, DType::kBF16}) {
    for (bool with_residual : {false, true}) {
      std::mt19937 rng(5);
      const int32_t rows = 4, dim = 896;
      const std::vector<char> x = Encode(Random(rows * dim, rng, 2), d);
      const std::vector<char> w = Encode(Random(dim, rng), d);
      std::vector<char> residual = Encode(Random(rows * dim, rng), d), want(x.size());
      DeviceBuffer dx(x), dw(w), dres(residual), dout(want);
      RmsNormArgs a;
      a.rows = rows, a.dim = dim, a.eps = 1e-6f, a.dtype = d;
      RmsNormArgs host = a;
      host.x = x.data(), host.weight = w.data(), host.out = want.data();
      host.residual = with_residual ? residual.data() : nullptr;
      ReferenceRmsNorm(host);
      a.x = dx.get(), a.weight = dw.get(), a.out = dout.get();
      a.residual = with_residual ? dres.get() : nullptr;
      ASSERT_CUDA(cuda::LaunchRmsNorm(a, nullptr));
      ASSERT_CUDA(cudaDeviceSynchronize());
      const std::string what = std::string("rmsnorm ") + DTypeName(d);
      ExpectClose(Decode(dout.Download<char>(), d), Decode(want, d), d, what);
      ExpectClose(Decode(dres.Download<char>(), d), Decode(residual, d), d, what + " residual");
    }
  }
}

// Default frequencies, and Llama-3's shape of scaling (low frequencies divided by 8): the
// kernel reads whatever inv_freq models/rope.h computed.
std::vector<float> InverseFrequencies(int32_t rotary_dim, bool llama3) {
  std::vector<float> f(rotary_dim / 2);
  for (int32_t i = 0; i < rotary_dim / 2; ++i) {
    f[i] = static_cast<float>(std::pow(500000.0, -2.0 * i / rotary_dim));
    if (llama3 && i >= rotary_dim / 4) f[i] /= 8;
  }
  return f;
}

TEST(RopeGpuTest, MatchesTheReference) {
  REQUIRE_GPU();
  for (DType d : {DType::kF32, DType::kBF16}) {
    for (int32_t head_dim : {64, 128}) {
      for (bool llama3 : {false, true}) {
        std::mt19937 rng(head_dim);
        const int32_t rows = 6, heads = 8, kv_heads = 2;
        std::vector<char> q = Encode(Random(rows * heads * head_dim, rng), d);
        std::vector<char> k = Encode(Random(rows * kv_heads * head_dim, rng), d);
        const std::vector<int64_t> positions = {0, 1, 17, 1000, 8191, 131000};
        const std::vector<float> inv_freq = InverseFrequencies(head_dim, llama3);
        DeviceBuffer dq(q), dk(k), dp(positions), df(inv_freq);
        RopeArgs a;
        a.rows = rows, a.num_heads = heads, a.num_kv_heads = kv_heads, a.head_dim = head_dim;
        a.rotary_dim = head_dim, a.attention_factor = 1, a.dtype = d;
        RopeArgs host = a;
        host.q = q.data(), host.k = k.data(), host.positions = positions.data();
        host.inv_freq = inv_freq.data();
        ReferenceRope(host);
        a.q = dq.get(), a.k = dk.get(), a.positions = dp.get<int64_t>();
        a.inv_freq = df.get<float>();
        ASSERT_CUDA(cuda::LaunchRope(a, nullptr));
        ASSERT_CUDA(cudaDeviceSynchronize());
        const std::string what = std::string("rope ") + DTypeName(d);
        ExpectClose(Decode(dq.Download<char>(), d), Decode(q, d), d, what + " q");
        ExpectClose(Decode(dk.Download<char>(), d), Decode(k, d), d, what + " k");
      }
    }
  }
}

TEST(SiluMulGpuTest, MatchesTheReference) {
  REQUIRE_GPU();
  for (DType d : {DType::kF32, DType::kBF16}) {
    std::mt19937 rng(9);
    const int32_t rows = 3, inner = 4864;
    const std::vector<char> x = Encode(Random(rows * 2 * inner, rng, 3), d);
    std::vector<char> want(int64_t{rows} * inner * DTypeBytes(d));
    DeviceBuffer dx(x), dout(want);
    SiluMulArgs a;
    a.rows = rows, a.inner = inner, a.dtype = d;
    SiluMulArgs host = a;
    host.x = x.data(), host.out = want.data();
    ReferenceSiluMul(host);
    a.x = dx.get(), a.out = dout.get();
    ASSERT_CUDA(cuda::LaunchSiluMul(a, nullptr));
    ASSERT_CUDA(cudaDeviceSynchronize());
    ExpectClose(Decode(dout.Download<char>(), d), Decode(want, d), d, "silu_mul");
  }
}

TEST(LogprobGpuTest, MatchesTheReferenceOverAQwenSizedVocabulary) {
  REQUIRE_GPU();
  for (DType d : {DType::kF32, DType::kBF16}) {
    std::mt19937 rng(11);
    const int32_t rows = 3, vocab = 151936;
    const std::vector<char> logits = Encode(Random(int64_t{rows} * vocab, rng, 4), d);
    const std::vector<int32_t> targets = {0, 151935, 4242};
    std::vector<float> want(rows);
    DeviceBuffer dl(logits), dt(targets), dout(want);
    LogprobArgs a;
    a.rows = rows, a.vocab = vocab, a.dtype = d;
    LogprobArgs host = a;
    host.logits = logits.data(), host.targets = targets.data(), host.logprobs = want.data();
    ReferenceLogprob(host);
    a.logits = dl.get(), a.targets = dt.get<int32_t>(), a.logprobs = dout.get<float>();
    ASSERT_CUDA(cuda::LaunchLogprob(a, nullptr));
    ASSERT_CUDA(cudaDeviceSynchronize());
    // fp32 output either way; the sums differ in order only.
    ExpectClose(dout.Download<float>(), want, DType::kF32, "logprob");
  }
}

struct SampleCase {
  std::vector<float> logits, temperature, top_p;
  std::vector<int32_t> top_k;
  std::vector<uint64_t> seeds;
  std::vector<int64_t> steps;
};

// Runs the sampler on the device and the reference; returns (device, reference) tokens.
std::pair<std::vector<int32_t>, std::vector<int32_t>> SampleBoth(const SampleCase& c, int32_t vocab,
                                                                 DType d) {
  const int32_t rows = static_cast<int32_t>(c.temperature.size());
  const std::vector<char> logits = Encode(c.logits, d);
  std::vector<int32_t> want(rows);
  std::vector<float> want_lp(rows);
  SampleArgs a;
  a.rows = rows, a.vocab = vocab, a.dtype = d;
  SampleArgs host = a;
  host.logits = logits.data(), host.temperature = c.temperature.data();
  host.top_k = c.top_k.data(), host.top_p = c.top_p.data(), host.seeds = c.seeds.data();
  host.steps = c.steps.data(), host.tokens = want.data(), host.logprobs = want_lp.data();
  ReferenceSample(host);
  DeviceBuffer dl(logits), dt(c.temperature), dk(c.top_k), dp(c.top_p), ds(c.seeds);
  DeviceBuffer dst(c.steps), tokens(want), lps(want_lp);
  a.logits = dl.get(), a.temperature = dt.get<float>(), a.top_k = dk.get<int32_t>();
  a.top_p = dp.get<float>(), a.seeds = ds.get<uint64_t>(), a.steps = dst.get<int64_t>();
  a.tokens = tokens.get<int32_t>(), a.logprobs = lps.get<float>();
  EXPECT_EQ(cuda::LaunchSample(a, nullptr), 0);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return {tokens.Download<int32_t>(), want};
}

TEST(SampleGpuTest, DrawsWhatTheReferenceDrawsForTheSameSeedsAndSteps) {
  REQUIRE_GPU();
  for (DType d : {DType::kF32, DType::kBF16}) {
    std::mt19937 rng(13);
    const int32_t rows = 256, vocab = 5000;
    SampleCase c;
    c.logits = Random(int64_t{rows} * vocab, rng, 3);
    for (int32_t r = 0; r < rows; ++r) {
      c.temperature.push_back(r % 4 == 0 ? 0.0f : 0.5f + 0.25f * (r % 5));
      c.top_k.push_back(r % 3 == 0 ? 0 : 1 + r % 50);
      c.top_p.push_back(r % 2 == 0 ? 1.0f : 0.5f + 0.1f * (r % 5));
      c.seeds.push_back(1000 + r);
      c.steps.push_back(r * 7);
    }
    const auto [got, want] = SampleBoth(c, vocab, d);
    int same = 0;
    for (int32_t r = 0; r < rows; ++r) same += got[r] == want[r];
    // The same noise per (seed, step, token); only a last-ulp tie can part them.
    EXPECT_GE(same, rows - 2) << DTypeName(d);
  }
}

TEST(SampleGpuTest, DrawsTheCandidatesDistribution) {
  REQUIRE_GPU();
  const int32_t vocab = 12, draws = 20000;
  const std::vector<float> row = {0.3f, -1, 2, 0.9f, 1.4f, -0.2f, 0.1f, 1.1f, -2, 0.6f, 1.7f, 0};
  SampleCase c;
  for (int32_t i = 0; i < draws; ++i) {
    c.logits.insert(c.logits.end(), row.begin(), row.end());
    c.temperature.push_back(0.8f), c.top_k.push_back(8), c.top_p.push_back(0.9f);
    c.seeds.push_back(99), c.steps.push_back(i);
  }
  const auto got = SampleBoth(c, vocab, DType::kF32).first;
  const Candidates cand = SampleCandidates(row.data(), vocab, 0.8f, 8, 0.9f);
  // chi-square at p = 0.001, up to 11 degrees of freedom; infinite outside the candidates
  EXPECT_LT(CandidatesChiSquare(got, cand), 31.3);
}

TEST(LaunchGpuTest, RefusesBadShapesBeforeEnqueuing) {
  REQUIRE_GPU();
  PagedAttentionArgs a;
  a.rows = 1, a.num_heads = 6, a.num_kv_heads = 4, a.head_dim = 64, a.block_size = 16;
  a.max_context = 1;
  char ws = 0;
  EXPECT_EQ(cuda::LaunchPagedAttention(a, &ws, nullptr), cudaErrorInvalidValue);  // 6 % 4
  a.num_kv_heads = 2, a.head_dim = 512;
  EXPECT_EQ(cuda::LaunchPagedAttention(a, &ws, nullptr), cudaErrorInvalidValue);
  RopeArgs r;
  r.rows = 1, r.num_heads = 1, r.head_dim = 64, r.rotary_dim = 65;
  EXPECT_EQ(cuda::LaunchRope(r, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace rlforge::kernels
