#include "kernels/reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>

#include "common/bfloat16.h"
#include "kernels/sample_rng.h"

namespace rlforge::kernels {

float LoadElement(const void* p, int64_t i, DType d) {
  return d == DType::kF32 ? static_cast<const float*>(p)[i]
                          : Bf16BitsToFloat(static_cast<const uint16_t*>(p)[i]);
}

void StoreElement(void* p, int64_t i, DType d, float v) {
  if (d == DType::kF32) {
    static_cast<float*>(p)[i] = v;
  } else {
    static_cast<uint16_t*>(p)[i] = FloatToBf16Bits(v);
  }
}

namespace {

float Round(float v, DType d) { return d == DType::kF32 ? v : RoundToBf16(v); }

std::vector<float> LoadRow(const void* p, int64_t row, int64_t n, DType d) {
  std::vector<float> out(n);
  for (int64_t i = 0; i < n; ++i) out[i] = LoadElement(p, row * n + i, d);
  return out;
}

// log(sum(exp(x))) in double.
double LogSumExp(const std::vector<float>& x) {
  const double m = *std::max_element(x.begin(), x.end());
  double s = 0;
  for (float v : x) s += std::exp(v - m);
  return m + std::log(s);
}

// softmax(scale * q . k_t) v_t over the row's context, for one query head, in double.
void AttendOneHead(const PagedAttentionArgs& a, int32_t r, int32_t h, std::vector<double>& out) {
  const int64_t d_head = a.head_dim, width = int64_t{a.num_kv_heads} * d_head;
  const int64_t kvh = h / (a.num_heads / a.num_kv_heads);
  const int32_t s = a.row_seq[r], ctx = a.row_context[r];
  const int32_t* table = a.tables + a.table_start[s];
  const int64_t skip_from =
      a.seq_skip_from ? a.seq_skip_from[s] : std::numeric_limits<int64_t>::max();
  const int64_t skip = a.seq_skip ? a.seq_skip[s] : 0;
  const int64_t q0 = (int64_t{r} * a.num_heads + h) * d_head;
  std::vector<double> scores(ctx);
  std::vector<int64_t> base(ctx);
  for (int32_t t = 0; t < ctx; ++t) {
    base[t] = PagedSlot(table, a.block_size, t, skip_from, skip) * width + kvh * d_head;
    double dot = 0;
    for (int64_t d = 0; d < d_head; ++d) {
      dot +=
          double{LoadElement(a.q, q0 + d, a.dtype)} * LoadElement(a.k_pool, base[t] + d, a.dtype);
    }
    scores[t] = dot * a.scale;
  }
  const double m = *std::max_element(scores.begin(), scores.end());
  double sum = 0;
  for (double& v : scores) sum += (v = std::exp(v - m));
  out.assign(d_head, 0.0);
  for (int32_t t = 0; t < ctx; ++t) {
    for (int64_t d = 0; d < d_head; ++d) {
      out[d] += scores[t] / sum * LoadElement(a.v_pool, base[t] + d, a.dtype);
    }
  }
}

}  // namespace

void ReferenceKvWrite(const KvWriteArgs& a) {
  const int64_t bytes = int64_t{a.num_kv_heads} * a.head_dim * DTypeBytes(a.dtype);
  for (int32_t r = 0; r < a.rows; ++r) {
    std::memcpy(static_cast<char*>(a.k_pool) + a.slots[r] * bytes,
                static_cast<const char*>(a.k) + r * bytes, bytes);
    std::memcpy(static_cast<char*>(a.v_pool) + a.slots[r] * bytes,
                static_cast<const char*>(a.v) + r * bytes, bytes);
  }
}

void ReferencePagedAttention(const PagedAttentionArgs& a) {
  std::vector<double> out;
  for (int32_t r = 0; r < a.rows; ++r) {
    for (int32_t h = 0; h < a.num_heads; ++h) {
      AttendOneHead(a, r, h, out);
      const int64_t o0 = (int64_t{r} * a.num_heads + h) * a.head_dim;
      for (int32_t d = 0; d < a.head_dim; ++d) {
        StoreElement(a.out, o0 + d, a.dtype, static_cast<float>(out[d]));
      }
    }
  }
}

void ReferenceRmsNorm(const RmsNormArgs& a) {
  for (int32_t r = 0; r < a.rows; ++r) {
    std::vector<float> h = LoadRow(a.x, r, a.dim, a.dtype);
    if (a.residual != nullptr) {
      for (int32_t i = 0; i < a.dim; ++i) {
        h[i] = Round(h[i] + LoadElement(a.residual, int64_t{r} * a.dim + i, a.dtype), a.dtype);
        StoreElement(a.residual, int64_t{r} * a.dim + i, a.dtype, h[i]);
      }
    }
    double squares = 0;
    for (float v : h) squares += double{v} * v;
    const float inv = static_cast<float>(1.0 / std::sqrt(squares / a.dim + a.eps));
    for (int32_t i = 0; i < a.dim; ++i) {
      const float w = LoadElement(a.weight, i, a.dtype);
      StoreElement(a.out, int64_t{r} * a.dim + i, a.dtype, w * Round(h[i] * inv, a.dtype));
    }
  }
}

void ReferenceRope(const RopeArgs& a) {
  const int32_t half = a.rotary_dim / 2;
  auto rotate = [&](void* x, int64_t heads, int32_t r, float c, float s, int32_t i) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t at = (r * heads + h) * a.head_dim + i;
      const float x1 = LoadElement(x, at, a.dtype), x2 = LoadElement(x, at + half, a.dtype);
      const DType t = a.dtype;
      StoreElement(x, at, t, Round(x1 * c, t) - Round(x2 * s, t));
      StoreElement(x, at + half, t, Round(x2 * c, t) + Round(x1 * s, t));
    }
  };
  for (int32_t r = 0; r < a.rows; ++r) {
    for (int32_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(a.positions[r]) * a.inv_freq[i];
      const float c = Round(std::cos(angle) * a.attention_factor, a.dtype);
      const float s = Round(std::sin(angle) * a.attention_factor, a.dtype);
      rotate(a.q, a.num_heads, r, c, s, i);
      rotate(a.k, a.num_kv_heads, r, c, s, i);
    }
  }
}

void ReferenceSiluMul(const SiluMulArgs& a) {
  for (int32_t r = 0; r < a.rows; ++r) {
    for (int32_t i = 0; i < a.inner; ++i) {
      const int64_t at = int64_t{r} * 2 * a.inner + i;
      const float g = LoadElement(a.x, at, a.dtype), u = LoadElement(a.x, at + a.inner, a.dtype);
      const float silu = Round(g / (1.0f + std::exp(-g)), a.dtype);
      StoreElement(a.out, int64_t{r} * a.inner + i, a.dtype, silu * u);
    }
  }
}

void ReferenceLogprob(const LogprobArgs& a) {
  for (int32_t r = 0; r < a.rows; ++r) {
    const std::vector<float> row = LoadRow(a.logits, r, a.vocab, a.dtype);
    a.logprobs[r] = static_cast<float>(row[a.targets[r]] - LogSumExp(row));
  }
}

Candidates SampleCandidates(const float* logits, int32_t vocab, float temperature, int32_t top_k,
                            float top_p) {
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t x, int32_t y) {
    return logits[x] > logits[y] || (logits[x] == logits[y] && x < y);
  });
  if (top_k > 0 && top_k < vocab) order.resize(top_k);
  const double top = logits[order[0]];
  std::vector<double> w(order.size());
  double total = 0;
  for (size_t j = 0; j < order.size(); ++j) {
    total += (w[j] = std::exp((double{logits[order[j]]} - top) / temperature));
  }
  size_t keep = order.size();
  if (top_p < 1.0f) {
    double acc = 0;
    for (size_t j = 0; j < order.size(); ++j) {
      acc += w[j];
      if (acc >= double{top_p} * total) {
        keep = j + 1;
        break;
      }
    }
  }
  Candidates c;
  c.tokens.assign(order.begin(), order.begin() + keep);
  const double kept = std::accumulate(w.begin(), w.begin() + keep, 0.0);
  for (size_t j = 0; j < keep; ++j) c.probs.push_back(w[j] / kept);
  return c;
}

double CandidatesChiSquare(const std::vector<int32_t>& drawn, const Candidates& c) {
  std::map<int32_t, int64_t> counts;
  for (int32_t t : drawn) ++counts[t];
  double chi = 0;
  for (size_t j = 0; j < c.tokens.size(); ++j) {
    const double expected = c.probs[j] * static_cast<double>(drawn.size());
    const auto it = counts.find(c.tokens[j]);
    const double seen = it == counts.end() ? 0 : static_cast<double>(it->second);
    chi += (seen - expected) * (seen - expected) / expected;
    if (it != counts.end()) counts.erase(it);
  }
  return counts.empty() ? chi : std::numeric_limits<double>::infinity();
}

void ReferenceSample(const SampleArgs& a) {
  for (int32_t r = 0; r < a.rows; ++r) {
    const std::vector<float> row = LoadRow(a.logits, r, a.vocab, a.dtype);
    int32_t token = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
    const float t = a.temperature[r];
    if (t > 0) {
      const Candidates c = SampleCandidates(row.data(), a.vocab, t, a.top_k[r], a.top_p[r]);
      float best = -std::numeric_limits<float>::infinity();
      for (int32_t id : c.tokens) {  // Gumbel-max; the lowest id among equal scores
        const float score = row[id] / t + GumbelNoise(a.seeds[r], a.steps[r], id);
        if (score > best || (score == best && id < token)) {
          best = score;
          token = id;
        }
      }
    }
    a.tokens[r] = token;
    a.logprobs[r] = static_cast<float>(row[token] - LogSumExp(row));
  }
}

}  // namespace rlforge::kernels
