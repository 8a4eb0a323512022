#include "models/greedy_generate.h"

#include <algorithm>
#include <limits>

namespace rlforge::models {

std::vector<std::vector<int32_t>> GreedyGenerate(Transformer& model,
                                                 const std::vector<std::vector<int32_t>>& prompts,
                                                 const GreedyOptions& options) {
  torch::NoGradGuard no_grad;
  const auto& c = model->config();
  const int64_t B = static_cast<int64_t>(prompts.size());
  std::vector<std::vector<int32_t>> out(prompts.size());
  if (B == 0) return out;
  int64_t T0 = 0;
  for (const auto& p : prompts) T0 = std::max<int64_t>(T0, static_cast<int64_t>(p.size()));
  const int64_t T_max = T0 + options.max_new_tokens;
  const int64_t nh = c.num_attention_heads, nkv = c.num_key_value_heads, d = c.head_dim;
  const int64_t g = nh / nkv;
  auto dtype = model->parameters()[0].scalar_type();

  // Left-padded prompt block; positions count from each row's first real token.
  auto tokens = torch::zeros({B, T0}, torch::kInt64);
  auto positions = torch::zeros({B, T0}, torch::kInt64);
  auto key_valid = torch::zeros({B, T_max}, torch::kBool);
  auto tok_a = tokens.accessor<int64_t, 2>();
  auto pos_a = positions.accessor<int64_t, 2>();
  auto val_a = key_valid.accessor<bool, 2>();
  std::vector<int64_t> next_pos(B);
  for (int64_t b = 0; b < B; ++b) {
    const auto& p = prompts[b];
    int64_t pad = T0 - static_cast<int64_t>(p.size());
    for (int64_t t = 0; t < static_cast<int64_t>(p.size()); ++t) {
      tok_a[b][pad + t] = p[t];
      pos_a[b][pad + t] = t;
      val_a[b][pad + t] = true;
    }
    next_pos[b] = static_cast<int64_t>(p.size());
  }
  std::vector<torch::Tensor> K(c.num_hidden_layers), V(c.num_hidden_layers);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    K[l] = torch::zeros({B, T_max, nkv, d}, torch::dtype(dtype));
    V[l] = torch::zeros({B, T_max, nkv, d}, torch::dtype(dtype));
  }
  int64_t cur = 0;  // columns already in the cache
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  auto attend = [&](int64_t layer, const torch::Tensor& q, const torch::Tensor& k,
                    const torch::Tensor& v) {
    const int64_t n = q.size(0) / B;
    K[layer].narrow(1, cur, n).copy_(k.view({B, n, nkv, d}));
    V[layer].narrow(1, cur, n).copy_(v.view({B, n, nkv, d}));
    const int64_t t = cur + n;
    auto keys = K[layer].narrow(1, 0, t).permute({0, 2, 1, 3}).unsqueeze(2);    // [B,kv,1,t,d]
    auto values = V[layer].narrow(1, 0, t).permute({0, 2, 1, 3}).unsqueeze(2);  // [B,kv,1,t,d]
    auto qq = q.view({B, n, nkv, g, d}).permute({0, 2, 3, 1, 4});               // [B,kv,g,n,d]
    auto scores = torch::matmul(qq, keys.transpose(-1, -2)).to(torch::kFloat32) * scale;
    // Key j is visible to query i when it is a real token not after it; a query always
    // sees itself, so padding rows stay finite.
    auto qi = torch::arange(n, torch::kInt64).unsqueeze(1) + cur;
    auto kj = torch::arange(t, torch::kInt64).unsqueeze(0);
    auto visible = key_valid.narrow(1, 0, t).view({B, 1, t}) & (kj <= qi).view({1, n, t});
    visible = visible | (kj == qi).view({1, n, t});
    scores =
        scores.masked_fill(~visible.view({B, 1, 1, n, t}), -std::numeric_limits<float>::infinity());
    auto probs = torch::softmax(scores, -1).to(dtype);
    return torch::matmul(probs, values).permute({0, 3, 1, 2, 4}).reshape({B * n, nh, d});
  };

  auto hidden = model->HiddenIncremental(tokens.view({-1}), positions.view({-1}), attend);
  cur = T0;
  auto last = hidden.view({B, T0, -1}).select(1, T0 - 1);
  std::vector<bool> done(B, false);
  int64_t remaining = B;
  for (int64_t step = 0; step < options.max_new_tokens && remaining > 0; ++step) {
    auto next = model->Logits(last).argmax(-1).to(torch::kInt64);  // [B]
    auto next_a = next.accessor<int64_t, 1>();
    auto pos = torch::zeros({B}, torch::kInt64);
    auto pos_s = pos.accessor<int64_t, 1>();
    for (int64_t b = 0; b < B; ++b) {
      if (!done[b]) {
        int32_t id = static_cast<int32_t>(next_a[b]);
        out[b].push_back(id);
        if (std::find(options.stop_tokens.begin(), options.stop_tokens.end(), id) !=
            options.stop_tokens.end()) {
          done[b] = true;
          --remaining;
        }
      }
      pos_s[b] = next_pos[b]++;
      val_a[b][cur] = true;
    }
    if (remaining == 0 || step + 1 == options.max_new_tokens) break;
    last = model->HiddenIncremental(next, pos, attend);
    cur += 1;
  }
  return out;
}

}  // namespace rlforge::models
