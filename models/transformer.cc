#include "models/transformer.h"

#include <cmath>
#include <limits>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"

namespace rlforge::models {

namespace {

torch::nn::Linear MakeLinear(int64_t in, int64_t out, bool bias) {
  torch::nn::Linear l(torch::nn::LinearOptions(in, out).bias(bias));
  torch::NoGradGuard g;
  l->weight.normal_(0.0, 0.02);  // transformers' initializer_range default
  if (bias) l->bias.zero_();
  return l;
}

// A module holding one "weight" parameter of ones (HF's RMSNorm).
torch::Tensor AddNorm(torch::nn::Module& parent, const std::string& name, int64_t size) {
  auto m = parent.register_module(name, std::make_shared<torch::nn::Module>());
  return m->register_parameter("weight", torch::ones({size}));
}

// q, k: [..., d]; cos/sin broadcast against them. HF's rotate_half convention.
torch::Tensor ApplyRope(const torch::Tensor& x, const torch::Tensor& cos,
                        const torch::Tensor& sin) {
  int64_t half = x.size(-1) / 2;
  auto x1 = x.narrow(-1, 0, half);
  auto x2 = x.narrow(-1, half, half);
  return x * cos + torch::cat({-x2, x1}, -1) * sin;
}

}  // namespace

absl::Status ValidateConfig(const TransformerConfig& c, const std::string& origin) {
  auto positive = [&](const char* key, int64_t v) -> absl::Status {
    if (v > 0) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": ", key, ": expected a positive integer, got ", v));
  };
  if (c.architecture != "LlamaForCausalLM" && c.architecture != "Qwen2ForCausalLM" &&
      c.architecture != "Qwen3ForCausalLM") {
    return absl::InvalidArgumentError(absl::StrCat(
        origin,
        ": architectures: expected LlamaForCausalLM, Qwen2ForCausalLM or Qwen3ForCausalLM, got ",
        c.architecture));
  }
  for (auto [key, v] : {std::pair<const char*, int64_t>{"vocab_size", c.vocab_size},
                        {"hidden_size", c.hidden_size},
                        {"intermediate_size", c.intermediate_size},
                        {"num_hidden_layers", c.num_hidden_layers},
                        {"num_attention_heads", c.num_attention_heads},
                        {"num_key_value_heads", c.num_key_value_heads},
                        {"head_dim", c.head_dim},
                        {"max_position_embeddings", c.max_position_embeddings}}) {
    if (auto s = positive(key, v); !s.ok()) return s;
  }
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": num_key_value_heads: ", c.num_key_value_heads,
                     " does not divide num_attention_heads ", c.num_attention_heads));
  }
  if (c.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": head_dim: RoPE needs an even head_dim, got ", c.head_dim));
  }
  if (!(c.rope_theta > 0) || !(c.rms_norm_eps > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(origin,
                                                   ": rope_theta and rms_norm_eps must be "
                                                   "positive, got ",
                                                   c.rope_theta, " and ", c.rms_norm_eps));
  }
  if (c.rope_scaling.type == RopeType::kDynamic && c.head_dim <= 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        origin, ": head_dim: dynamic RoPE needs a head_dim above 2, got ", c.head_dim));
  }
  return ValidateRopeScaling(c.rope_scaling, origin, "rope_scaling");
}

int64_t ParameterCount(const TransformerConfig& c) {
  int64_t h = c.hidden_size, d = c.head_dim;
  int64_t attn = h * c.num_attention_heads * d * 2 + h * c.num_key_value_heads * d * 2;
  if (c.attention_bias) attn += (c.num_attention_heads + 2 * c.num_key_value_heads) * d;
  if (c.o_proj_bias()) attn += h;
  if (c.qk_norm()) attn += 2 * d;
  int64_t layer = attn + 3 * h * c.intermediate_size + 2 * h;
  int64_t n = c.vocab_size * h + c.num_hidden_layers * layer + h;
  if (!c.tie_word_embeddings) n += c.vocab_size * h;
  return n;
}

TransformerImpl::TransformerImpl(const TransformerConfig& config, bool value_head)
    : config_(config) {
  const auto& c = config_;
  int64_t h = c.hidden_size, d = c.head_dim;
  auto model = register_module("model", std::make_shared<torch::nn::Module>());
  embed_ = model->register_module("embed_tokens", torch::nn::Embedding(c.vocab_size, h));
  {
    torch::NoGradGuard g;
    embed_->weight.normal_(0.0, 0.02);
  }
  auto list = model->register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    auto block = std::make_shared<torch::nn::Module>();
    Layer l;
    l.input_norm = AddNorm(*block, "input_layernorm", h);
    auto attn = block->register_module("self_attn", std::make_shared<torch::nn::Module>());
    l.q =
        attn->register_module("q_proj", MakeLinear(h, c.num_attention_heads * d, c.attention_bias));
    l.k =
        attn->register_module("k_proj", MakeLinear(h, c.num_key_value_heads * d, c.attention_bias));
    l.v =
        attn->register_module("v_proj", MakeLinear(h, c.num_key_value_heads * d, c.attention_bias));
    l.o =
        attn->register_module("o_proj", MakeLinear(c.num_attention_heads * d, h, c.o_proj_bias()));
    if (c.qk_norm()) {
      l.q_norm = AddNorm(*attn, "q_norm", d);
      l.k_norm = AddNorm(*attn, "k_norm", d);
    }
    l.post_norm = AddNorm(*block, "post_attention_layernorm", h);
    auto mlp = block->register_module("mlp", std::make_shared<torch::nn::Module>());
    l.gate = mlp->register_module("gate_proj", MakeLinear(h, c.intermediate_size, false));
    l.up = mlp->register_module("up_proj", MakeLinear(h, c.intermediate_size, false));
    l.down = mlp->register_module("down_proj", MakeLinear(c.intermediate_size, h, false));
    list->push_back(block);
    layers_.push_back(std::move(l));
  }
  final_norm_ = AddNorm(*model, "norm", h);
  if (!c.tie_word_embeddings)
    lm_head_ = register_module("lm_head", MakeLinear(h, c.vocab_size, false));
  if (value_head) value_head_ = register_module("value_head", MakeLinear(h, 1, true));
  rope_ = RopeInverseFrequencies(c.rope_scaling, c.rope_theta, d);
}

torch::Tensor TransformerImpl::Project(const torch::nn::Linear& l, const torch::Tensor& x) const {
  torch::Tensor y = torch::nn::functional::linear(x, l->weight, l->bias);
  if (adapters_.empty()) return y;
  const auto it = adapters_.find(l.get());
  if (it == adapters_.end()) return y;
  const LoraAdapter& a = it->second;
  torch::Tensor in = x;
  if (a.dropout > 0 && is_training()) in = torch::dropout(x, a.dropout, /*train=*/true);
  namespace F = torch::nn::functional;
  return y + F::linear(F::linear(in, a.a->weight), a.b->weight) * a.scale;
}

void TransformerImpl::AttachAdapter(const torch::nn::LinearImpl* proj, LoraAdapter adapter) {
  adapters_[proj] = std::move(adapter);
}

torch::Tensor TransformerImpl::RmsNorm(const torch::Tensor& x, const torch::Tensor& weight) const {
  auto xf = x.to(torch::kFloat32);
  auto var = xf.pow(2).mean(-1, /*keepdim=*/true);
  return weight * (xf * torch::rsqrt(var + config_.rms_norm_eps)).to(x.scalar_type());
}

torch::Tensor TransformerImpl::Mlp(const Layer& l, const torch::Tensor& x) const {
  return Project(l.down, torch::silu(Project(l.gate, x)) * Project(l.up, x));
}

std::pair<torch::Tensor, torch::Tensor> TransformerImpl::RopeTables(
    const torch::Tensor& positions, torch::Dtype dtype, const torch::Tensor& lengths) const {
  const auto& c = config_;
  auto inv_freq = c.rope_scaling.type == RopeType::kDynamic
                      ? DynamicNtkInverseFrequencies(c.rope_scaling, c.rope_theta, c.head_dim,
                                                     c.max_position_embeddings, lengths)
                      : rope_.inv_freq.to(positions.device());
  auto freqs = positions.to(torch::kFloat32).unsqueeze(-1) * inv_freq;
  auto emb = torch::cat({freqs, freqs}, -1);
  return {(emb.cos() * rope_.attention_factor).to(dtype),
          (emb.sin() * rope_.attention_factor).to(dtype)};
}

TransformerImpl::Qkv TransformerImpl::ProjectQkv(const Layer& l, const torch::Tensor& hn,
                                                 const torch::Tensor& cos,
                                                 const torch::Tensor& sin) const {
  const auto& c = config_;
  auto heads = [&](const torch::nn::Linear& proj, int64_t n) {
    std::vector<int64_t> shape = hn.sizes().vec();
    shape.back() = n;
    shape.push_back(c.head_dim);
    return Project(proj, hn).view(shape);
  };
  auto q = heads(l.q, c.num_attention_heads);
  auto k = heads(l.k, c.num_key_value_heads);
  if (c.qk_norm()) {
    q = RmsNorm(q, l.q_norm);
    k = RmsNorm(k, l.k_norm);
  }
  return {ApplyRope(q, cos, sin), ApplyRope(k, cos, sin), heads(l.v, c.num_key_value_heads)};
}

torch::Tensor TransformerImpl::Hidden(const torch::Tensor& tokens, const torch::Tensor& positions,
                                      const torch::Tensor& segment_ids,
                                      const torch::Tensor& shared_segment) {
  const auto& c = config_;
  const int64_t B = tokens.size(0), T = tokens.size(1);
  const int64_t nh = c.num_attention_heads, nkv = c.num_key_value_heads, d = c.head_dim;
  const int64_t g = nh / nkv;
  auto x = embed_(tokens);
  auto dtype = x.scalar_type();
  // Dynamic NTK scales for the longest sequence of the call, as transformers' forward does.
  const bool dynamic = c.rope_scaling.type == RopeType::kDynamic;
  auto [cos, sin] = RopeTables(positions, dtype, dynamic ? positions.max() + 1 : torch::Tensor());
  cos = cos.unsqueeze(2);
  sin = sin.unsqueeze(2);
  // Additive mask [B, 1, 1, T, T]: same segment and not in the future.
  auto same = segment_ids.unsqueeze(2) == segment_ids.unsqueeze(1);
  if (shared_segment.defined())
    same = same | (shared_segment.unsqueeze(2) == segment_ids.unsqueeze(1));
  auto causal = torch::ones({T, T}, torch::dtype(torch::kBool).device(tokens.device())).tril();
  auto mask = torch::zeros({B, T, T}, torch::dtype(torch::kFloat32).device(tokens.device()))
                  .masked_fill_(~(same & causal), -std::numeric_limits<float>::infinity())
                  .view({B, 1, 1, T, T});
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = layers_[i];
    if (hooks_.before) hooks_.before(static_cast<int64_t>(i));
    auto hn = RmsNorm(x, l.input_norm);
    Qkv qkv = ProjectQkv(l, hn, cos, sin);
    auto q = qkv.q.transpose(1, 2);  // [B, nh, T, d]
    auto k = qkv.k.transpose(1, 2);  // [B, nkv, T, d]
    auto v = qkv.v.transpose(1, 2);
    auto qg = q.reshape({B, nkv, g, T, d});
    auto scores = torch::matmul(qg, k.unsqueeze(2).transpose(-1, -2)).to(torch::kFloat32) * scale;
    auto probs = torch::softmax(scores + mask, -1).to(dtype);
    auto out = torch::matmul(probs, v.unsqueeze(2))  // [B, nkv, g, T, d]
                   .reshape({B, nh, T, d})
                   .transpose(1, 2)
                   .reshape({B, T, nh * d});
    x = x + Project(l.o, out);
    x = x + Mlp(l, RmsNorm(x, l.post_norm));
    if (hooks_.after) x = hooks_.after(static_cast<int64_t>(i), x);
  }
  return RmsNorm(x, final_norm_);
}

torch::Tensor TransformerImpl::Logits(const torch::Tensor& hidden) {
  if (config_.tie_word_embeddings) return torch::nn::functional::linear(hidden, embed_->weight);
  return lm_head_(hidden);
}

torch::Tensor TransformerImpl::Values(const torch::Tensor& hidden) {
  TORCH_CHECK(!value_head_.is_empty(), "Transformer::Values: model built without a value head");
  return value_head_(hidden).squeeze(-1);
}

torch::Tensor TransformerImpl::HiddenIncremental(const torch::Tensor& tokens,
                                                 const torch::Tensor& positions,
                                                 const AttendFn& attend,
                                                 const IncrementalKernels* kernels) {
  if (kernels != nullptr) return HiddenThroughKernels(tokens, positions, attend, *kernels);
  const auto& c = config_;
  const int64_t N = tokens.size(0);
  const int64_t nh = c.num_attention_heads, d = c.head_dim;
  auto x = embed_(tokens);
  // Dynamic NTK: each token is rotated for the length it ends, position + 1, and its key
  // keeps that rotation in the cache. That is what transformers does when it decodes one
  // token at a time with a KV cache; a chunk it prefills in one call it scales for the
  // chunk's end instead, as Hidden() does. Below max_position_embeddings all agree.
  auto [cos, sin] = RopeTables(positions, x.scalar_type(), positions + 1);  // [N, d]
  cos = cos.unsqueeze(1);
  sin = sin.unsqueeze(1);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const auto& l = layers_[i];
    Qkv qkv = ProjectQkv(l, RmsNorm(x, l.input_norm), cos, sin);
    auto out = attend(static_cast<int64_t>(i), qkv.q, qkv.k, qkv.v);
    x = x + Project(l.o, out.reshape({N, nh * d}));
    x = x + Mlp(l, RmsNorm(x, l.post_norm));
  }
  return RmsNorm(x, final_norm_);
}

// HiddenIncremental's layers with the kernels' fused steps: each layer's residual add goes
// into the next RMSNorm, gate and up are laid side by side for SiLU-and-multiply.
torch::Tensor TransformerImpl::HiddenThroughKernels(const torch::Tensor& tokens,
                                                    const torch::Tensor& positions,
                                                    const AttendFn& attend,
                                                    const IncrementalKernels& kernels) {
  const auto& c = config_;
  const int64_t N = tokens.size(0), nh = c.num_attention_heads, d = c.head_dim;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const bool dynamic = c.rope_scaling.type == RopeType::kDynamic;
  torch::Tensor cos, sin, inv_freq;
  if (dynamic) {  // per-position frequencies: libtorch's tables, as HiddenIncremental
    std::tie(cos, sin) = RopeTables(positions, embed_->weight.scalar_type(), positions + 1);
    cos = cos.unsqueeze(1), sin = sin.unsqueeze(1);
  } else {
    // The table moves to the step's device once and stays: a copy each step would be a
    // host-to-device copy, which a CUDA graph's capture refuses (RopeTables copies as it needs).
    if (rope_.inv_freq.device() != positions.device()) {
      rope_.inv_freq = rope_.inv_freq.to(positions.device()).contiguous();
    }
    inv_freq = rope_.inv_freq;
  }
  auto heads = [&](const torch::nn::Linear& proj, const torch::Tensor& hn, int64_t n) {
    return Project(proj, hn).view({N, n, d});
  };
  torch::Tensor residual = embed_(tokens).contiguous(), delta;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = layers_[i];
    torch::Tensor hn = i == 0 ? kernels.rms_norm(residual, nullptr, l.input_norm, eps)
                              : kernels.rms_norm(delta, &residual, l.input_norm, eps);
    torch::Tensor q = heads(l.q, hn, nh), k = heads(l.k, hn, c.num_key_value_heads);
    if (c.qk_norm()) {
      q = kernels.rms_norm(q.reshape({-1, d}), nullptr, l.q_norm, eps).view({N, nh, d});
      k = kernels.rms_norm(k.reshape({-1, d}), nullptr, l.k_norm, eps).view({N, -1, d});
    }
    if (dynamic) {
      q = ApplyRope(q, cos, sin), k = ApplyRope(k, cos, sin);
    } else {
      q = q.contiguous(), k = k.contiguous();
      kernels.rope(q, k, positions, inv_freq, static_cast<float>(rope_.attention_factor));
    }
    torch::Tensor out =
        attend(static_cast<int64_t>(i), q, k, heads(l.v, hn, c.num_key_value_heads));
    delta = Project(l.o, out.reshape({N, nh * d}));
    hn = kernels.rms_norm(delta, &residual, l.post_norm, eps);
    delta =
        Project(l.down, kernels.silu_mul(torch::cat({Project(l.gate, hn), Project(l.up, hn)}, -1)));
  }
  if (layers_.empty()) return kernels.rms_norm(residual, nullptr, final_norm_, eps);
  return kernels.rms_norm(delta, &residual, final_norm_, eps);
}

torch::Tensor TransformerImpl::ContiguousAttention(const torch::Tensor& q, const torch::Tensor& k,
                                                   const torch::Tensor& v) const {
  const int64_t n = q.size(0), t = k.size(0), nh = q.size(1), nkv = k.size(1), d = q.size(2);
  const int64_t g = nh / nkv;
  auto qg = q.permute({1, 0, 2}).reshape({nkv, g, n, d});
  auto kk = k.permute({1, 0, 2}).unsqueeze(1);  // [nkv, 1, t, d]
  auto vv = v.permute({1, 0, 2}).unsqueeze(1);
  auto scores = torch::matmul(qg, kk.transpose(-1, -2)).to(torch::kFloat32) /
                std::sqrt(static_cast<double>(d));  // [nkv, g, n, t]
  if (n > 1) {
    // Query i sits at position t - n + i and sees keys up to it.
    auto qi =
        torch::arange(n, torch::dtype(torch::kInt64).device(q.device())).unsqueeze(1) + (t - n);
    auto kj = torch::arange(t, torch::dtype(torch::kInt64).device(q.device())).unsqueeze(0);
    scores = scores.masked_fill(kj > qi, -std::numeric_limits<float>::infinity());
  }
  auto probs = torch::softmax(scores, -1).to(q.scalar_type());
  return torch::matmul(probs, vv).reshape({nh, n, d}).permute({1, 0, 2});
}

}  // namespace rlforge::models
