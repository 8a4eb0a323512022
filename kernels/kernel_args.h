// The arguments of rlforge's generation kernels: plain structs over raw pointers, shared by
// the CUDA kernels (kernels/cuda_kernels.h) and their CPU references (kernels/reference.h),
// so that both read one description of every layout.
//
// Tensors are row-major and contiguous, in `dtype` (fp32, or bf16 as raw 16-bit words) unless
// a field says otherwise; every kernel computes in fp32 and rounds to `dtype` where the
// torch / transformers code it replaces rounds (each field's comment says where).
//
// The paged KV pool is the engine's (rollout/paged_attention.h): per layer, k and v are
// [num_blocks, block_size, num_kv_heads, head_dim]. Position p of sequence s lives at slot
// table[u / block_size] * block_size + u % block_size of s's block table, with
// u = p < skip_from[s] ? p : p + skip[s] (a sample of a shared prompt leaves the rest of the
// prompt's last, shared block unused; no skip arrays: u = p). A query row is one new token of
// one sequence and attends to positions [0, context) of it, so decode rows (one per
// sequence) and prefill / chunked-prefill rows (consecutive positions, causal by their
// contexts) share one description.
#pragma once

#include <cstdint>

namespace rlforge::kernels {

enum class DType : int32_t { kF32 = 0, kBF16 = 1 };

constexpr int64_t DTypeBytes(DType d) { return d == DType::kF32 ? 4 : 2; }
constexpr const char* DTypeName(DType d) { return d == DType::kF32 ? "fp32" : "bf16"; }

// The slot of position `p` of a sequence whose block table is `table`.
constexpr int64_t PagedSlot(const int32_t* table, int64_t block_size, int64_t p, int64_t skip_from,
                            int64_t skip) {
  const int64_t u = p < skip_from ? p : p + skip;
  return static_cast<int64_t>(table[u / block_size]) * block_size + u % block_size;
}

// k_pool[slots[r]] = k[r] and v_pool[slots[r]] = v[r] for every row; k, v:
// [rows, num_kv_heads, head_dim]. Pure copies (no rounding).
struct KvWriteArgs {
  const void* k = nullptr;
  const void* v = nullptr;
  void* k_pool = nullptr;
  void* v_pool = nullptr;
  const int64_t* slots = nullptr;  // [rows]
  int32_t rows = 0, num_kv_heads = 0, head_dim = 0;
  DType dtype = DType::kF32;
};

// out[r, h] = softmax(scale * q[r, h] . K[0, context_r)) V[0, context_r) over row r's
// sequence, query head h reading kv head h / (num_heads / num_kv_heads). Scores, softmax and
// the weighted sum in fp32; out rounded to dtype once. Never reads a pool slot outside the
// rows' contexts (padding may hold anything, NaN included).
struct PagedAttentionArgs {
  const void* q = nullptr;  // [rows, num_heads, head_dim]
  const void* k_pool = nullptr;
  const void* v_pool = nullptr;
  void* out = nullptr;                     // [rows, num_heads, head_dim]
  const int32_t* row_seq = nullptr;        // [rows] sequence of each row
  const int32_t* row_context = nullptr;    // [rows] positions visible, >= 1
  const int32_t* tables = nullptr;         // every sequence's block table, concatenated
  const int32_t* table_start = nullptr;    // [sequences + 1] offsets into tables
  const int64_t* seq_skip_from = nullptr;  // [sequences], or null (no gaps)
  const int64_t* seq_skip = nullptr;       // [sequences], or null
  int32_t rows = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0, block_size = 0;
  int32_t max_context = 0;  // >= every row_context (host-side; sizes the split-K grid)
  float scale = 0;          // usually 1 / sqrt(head_dim)
  DType dtype = DType::kF32;
};

// With residual: residual = dtype(x + residual), then h = residual; without: h = x.
// out = dtype(weight * dtype(h * rsqrt(mean(h^2) + eps))), transformers' Llama/Qwen RMSNorm
// (normalised in fp32, rounded to dtype, then scaled by the weight). out may alias x.
struct RmsNormArgs {
  const void* x = nullptr;       // [rows, dim]
  void* residual = nullptr;      // [rows, dim] read and written, or null
  const void* weight = nullptr;  // [dim]
  void* out = nullptr;           // [rows, dim]
  int32_t rows = 0, dim = 0;
  float eps = 1e-6f;
  DType dtype = DType::kF32;
};

// Rotary embedding in place, transformers' rotate_half form over the first rotary_dim of
// each head: with a = positions[r] * inv_freq[i] (fp32), c = dtype(cos(a) * attention_factor),
// s = dtype(sin(a) * attention_factor):
//   x[i] <- dtype(dtype(x[i] * c) - dtype(x[i + half] * s)),
//   x[i + half] <- dtype(dtype(x[i + half] * c) + dtype(x[i] * s)),  half = rotary_dim / 2.
// inv_freq carries the RoPE type (default, linear, llama3, yarn: models/rope.h computes it).
struct RopeArgs {
  void* q = nullptr;                   // [rows, num_heads, head_dim]
  void* k = nullptr;                   // [rows, num_kv_heads, head_dim]
  const int64_t* positions = nullptr;  // [rows]
  const float* inv_freq = nullptr;     // [rotary_dim / 2]
  int32_t rows = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0, rotary_dim = 0;
  float attention_factor = 1;
  DType dtype = DType::kF32;
};

// out[r, i] = dtype(dtype(silu(x[r, i])) * x[r, inner + i]); x: [rows, 2 * inner] (gate, then
// up, as a fused gate_up projection lays them out).
struct SiluMulArgs {
  const void* x = nullptr;
  void* out = nullptr;  // [rows, inner]
  int32_t rows = 0, inner = 0;
  DType dtype = DType::kF32;
};

// logprobs[r] = logits[r, targets[r]] - logsumexp(logits[r, :]) in fp32, without forming the
// softmax.
struct LogprobArgs {
  const void* logits = nullptr;      // [rows, vocab]
  const int32_t* targets = nullptr;  // [rows]
  float* logprobs = nullptr;         // [rows] fp32
  int32_t rows = 0, vocab = 0;
  DType dtype = DType::kF32;
};

// One token per row, rollout/sampler.h's distribution: temperature 0 takes the argmax (the
// lowest id among ties); otherwise the candidates are the top_k largest logits (0: all), then
// the smallest set of the largest of those whose tempered mass exp(logit / T) reaches top_p of
// theirs (1: all), and the draw is Gumbel-max over them: argmax logit / T + G, with
// G = -log(-log(u)) and u = GumbelUniform(seeds[r], steps[r], token id) (kernels/sample_rng.h),
// so a row's draw depends on its seed and step only. logprobs[r] is the token's logprob under
// the untempered, untruncated distribution (what the trainer's ratio compares against).
struct SampleArgs {
  const void* logits = nullptr;        // [rows, vocab]
  const float* temperature = nullptr;  // [rows]
  const int32_t* top_k = nullptr;      // [rows]
  const float* top_p = nullptr;        // [rows]
  const uint64_t* seeds = nullptr;     // [rows]
  const int64_t* steps = nullptr;      // [rows] e.g. the token's position
  int32_t* tokens = nullptr;           // [rows]
  float* logprobs = nullptr;           // [rows]
  int32_t rows = 0, vocab = 0;
  DType dtype = DType::kF32;
};

}  // namespace rlforge::kernels
