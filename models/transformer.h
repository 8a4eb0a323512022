// Transformer: the decoder-only language model of the Llama / Qwen2 / Qwen3 family.
//
// tokens -> embed -> N x [RMSNorm -> GQA attention (RoPE) -> + -> RMSNorm -> SwiGLU -> +]
//        -> RMSNorm -> hidden -> lm_head -> logits   (and value_head -> values, optional)
//
// Two forwards share the same weights:
//  - Hidden(): training and scoring over [B, T] rows, padded or packed (segment ids
//    keep packed sequences apart; positions restart per segment).
//  - HiddenIncremental(): the rollout engine's step; new tokens of many sequences
//    flattened to [N], attention delegated to a callback that owns the KV cache.
// Qwen3 adds a per-head RMSNorm on q and k before RoPE (q_norm, k_norm); RoPE may be scaled
// (rope.h). Parameter names are Hugging Face's exactly, so checkpoints map 1:1 (hf_checkpoint.h).
// fp32 or bf16 (module.to(dtype)); norms and softmax are computed in fp32 as in
// transformers. Not thread-safe; one owner.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "models/rope.h"

namespace rlforge::models {

struct TransformerConfig {
  // "LlamaForCausalLM" | "Qwen2ForCausalLM" | "Qwen3ForCausalLM"
  std::string architecture = "LlamaForCausalLM";
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;  // hidden_size / num_attention_heads unless given
  int64_t max_position_embeddings = 0;
  double rope_theta = 10000;
  RopeScaling rope_scaling;  // type kDefault: none
  double rms_norm_eps = 1e-6;
  bool attention_bias = false;  // q/k/v bias, and o_proj's but in Qwen2 (Qwen2: always true)
  bool tie_word_embeddings = false;
  int64_t bos_token_id = -1, eos_token_id = -1;

  // Derived from the architecture, as transformers builds each one.
  bool qk_norm() const { return architecture == "Qwen3ForCausalLM"; }
  bool o_proj_bias() const { return attention_bias && architecture != "Qwen2ForCausalLM"; }
};

// Checks sizes and divisibility; the message names the key and value.
absl::Status ValidateConfig(const TransformerConfig& config, const std::string& origin);

// Parses a Hugging Face config.json (LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM).
// RoPE scaling comes from rope_scaling or transformers-5's rope_parameters. Features this
// model does not implement (other RoPE types, sliding window, mlp_bias, activations other
// than silu, unknown RoPE keys) are errors naming `origin` and the key, never silently ignored.
absl::StatusOr<TransformerConfig> ParseHfConfig(const std::string& config_json_text,
                                                const std::string& origin);

// config.json text that transformers reads back into the same model. `torch_dtype` is
// "float32" or "bfloat16".
std::string WriteHfConfig(const TransformerConfig& config, const std::string& torch_dtype);

// Number of parameters (embedding and head counted once when tied; no value head).
int64_t ParameterCount(const TransformerConfig& config);

class TransformerImpl : public torch::nn::Module {
 public:
  explicit TransformerImpl(const TransformerConfig& config, bool value_head = false);

  const TransformerConfig& config() const { return config_; }
  bool has_value_head() const { return !value_head_.is_empty(); }

  // tokens, positions, segment_ids: [B, T] int64. A token attends to earlier-or-equal
  // tokens of the same segment id in its row; segment id < 0 marks padding (its output is
  // defined but meaningless). Returns final-normed hidden [B, T, H].
  //
  // shared_segment [B, T] int64 (optional): token i also attends to earlier tokens whose
  // segment id is shared_segment[i] (use -2 for none). This lets n responses in one row
  // share their prompt, computed once: prompt segment 0, response k segment k with
  // shared_segment 0 (tree attention of depth one).
  torch::Tensor Hidden(const torch::Tensor& tokens, const torch::Tensor& positions,
                       const torch::Tensor& segment_ids,
                       const torch::Tensor& shared_segment = torch::Tensor());
  torch::Tensor Logits(const torch::Tensor& hidden);  // [..., vocab]
  torch::Tensor Values(const torch::Tensor& hidden);  // [...]; needs the value head

  // tokens, positions: [N] int64, the new tokens of a batch of sequences flattened.
  // Per layer calls attend(layer, q [N, heads, head_dim], k [N, kv_heads, head_dim],
  // v [N, kv_heads, head_dim]) with RoPE applied to q and k; attend stores k, v in its
  // cache and returns the attention output [N, heads, head_dim] (scale 1/sqrt(head_dim),
  // kv head of q head h = h / (heads / kv_heads)). Returns final-normed hidden [N, H].
  using AttendFn = std::function<torch::Tensor(int64_t layer, const torch::Tensor& q,
                                               const torch::Tensor& k, const torch::Tensor& v)>;
  // Replacements for HiddenIncremental's elementwise steps, each with the contract and the
  // rounding of its kernel in kernels/kernel_args.h (the rollout engine's kernel path passes
  // the kernel library's; rollout/kernel_ops.h). A callback reports failure by throwing.
  // Inference only: the kernels write in place, unseen by autograd.
  struct IncrementalKernels {
    // RMSNorm of x [rows, dim] by weight [dim]; with residual: residual <- x + residual first,
    // and that is normed (the decoder's residual add fused in).
    std::function<torch::Tensor(const torch::Tensor& x, torch::Tensor* residual,
                                const torch::Tensor& weight, float eps)>
        rms_norm;
    // RoPE in place on q [N, heads, d] and k [N, kv_heads, d] at positions [N].
    std::function<void(torch::Tensor& q, torch::Tensor& k, const torch::Tensor& positions,
                       const torch::Tensor& inv_freq, float attention_factor)>
        rope;
    // silu(x[:, :inner]) * x[:, inner:] for x [rows, 2 * inner].
    std::function<torch::Tensor(const torch::Tensor& x)> silu_mul;
  };
  // With `kernels`, their steps replace the libtorch ones (dynamic-NTK RoPE, whose frequencies
  // vary by position, stays in libtorch): the same result within rounding.
  torch::Tensor HiddenIncremental(const torch::Tensor& tokens, const torch::Tensor& positions,
                                  const AttendFn& attend,
                                  const IncrementalKernels* kernels = nullptr);

  // Called around each layer of Hidden() (not of HiddenIncremental); empty by default. The
  // sharded trainer gathers a layer's parameters in `before` and, in `after`, frees them and
  // hooks the layer's output so backward gathers them again (trainer/sharded_model.h).
  struct LayerHooks {
    std::function<void(int64_t layer)> before;
    std::function<torch::Tensor(int64_t layer, const torch::Tensor& out)> after;
  };
  void set_layer_hooks(LayerHooks hooks) { hooks_ = std::move(hooks); }

  // A low-rank adapter on one projection (models/lora.h): y = W x + scale * b(a(dropout(x))),
  // dropout only in training mode. `a` and `b` are registered under the projection by the
  // caller (lora_A, lora_B: PEFT's names); the projection must be this model's.
  struct LoraAdapter {
    torch::nn::Linear a{nullptr}, b{nullptr};
    double scale = 0, dropout = 0;
  };
  void AttachAdapter(const torch::nn::LinearImpl* proj, LoraAdapter adapter);
  bool has_adapters() const { return !adapters_.empty(); }

  // Reference attention for one sequence's contiguous cache: q [n, heads, d] at the last n
  // positions of k, v [t, kv_heads, d] (causal within the n). Used by tests and simple
  // greedy loops; the rollout engine has its own.
  torch::Tensor ContiguousAttention(const torch::Tensor& q, const torch::Tensor& k,
                                    const torch::Tensor& v) const;

  // (cos, sin) [..., head_dim] for int64 positions [...], in `dtype`, times the RoPE
  // attention factor. Dynamic NTK scales for sequences of length `lengths` (int64,
  // broadcastable to positions; required for it); other types ignore it.
  std::pair<torch::Tensor, torch::Tensor> RopeTables(
      const torch::Tensor& positions, torch::Dtype dtype,
      const torch::Tensor& lengths = torch::Tensor()) const;

 private:
  struct Layer {
    torch::Tensor input_norm, post_norm;
    torch::Tensor q_norm, k_norm;  // [head_dim], Qwen3 only
    torch::nn::Linear q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr};
    torch::nn::Linear gate{nullptr}, up{nullptr}, down{nullptr};
  };
  torch::Tensor Mlp(const Layer& layer, const torch::Tensor& x) const;
  // q [..., heads, d] and k [..., kv_heads, d] projected, normed (Qwen3) and rotated; v.
  struct Qkv {
    torch::Tensor q, k, v;
  };
  Qkv ProjectQkv(const Layer& layer, const torch::Tensor& hn, const torch::Tensor& cos,
                 const torch::Tensor& sin) const;
  torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight) const;
  // x through projection l, plus its adapter if it has one.
  torch::Tensor Project(const torch::nn::Linear& l, const torch::Tensor& x) const;
  torch::Tensor HiddenThroughKernels(const torch::Tensor& tokens, const torch::Tensor& positions,
                                     const AttendFn& attend, const IncrementalKernels& kernels);

  TransformerConfig config_;
  torch::nn::Embedding embed_{nullptr};
  std::vector<Layer> layers_;
  torch::Tensor final_norm_;
  torch::nn::Linear lm_head_{nullptr};
  torch::nn::Linear value_head_{nullptr};
  RopeFrequencies rope_;  // inv_freq [head_dim / 2] fp32, not a parameter
  LayerHooks hooks_;
  std::map<const torch::nn::LinearImpl*, LoraAdapter> adapters_;
};
TORCH_MODULE(Transformer);

}  // namespace rlforge::models
