// FastPpoGrad: the PPO loss of an ActorCritic and its exact gradient, without
// autograd.
//
// normalised obs -> actor MLP -> logits | mean -> log-prob, entropy -> clipped surrogate
//                -> critic MLP -> value -> (clipped) value loss
// backward by hand: a few BLAS sgemm calls per layer, elementwise loops, the
// gradients written straight into the parameters' .grad() (FlatAdamW's flat
// buffer), ready for ClipGradNorm and Step.
//
// For the 64x64 networks of control tasks libtorch spends ~0.75 ms per PPO
// minibatch on per-op dispatch and graph bookkeeping, against ~0.1 ms of
// arithmetic, and the update is ~90% of an iteration. Same loss as
// ppo_loss.h (ClippedPolicyLoss, ValueLoss, entropy bonus) with the same
// subgradients at ties and clip edges as torch's maximum/clamp;
// fast_ppo_grad_test.cc checks loss and every gradient against autograd.
// Holds pointers into the module's parameters: the module (and FlatAdamW,
// which re-points them) must outlive it and keep their storage. One thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/actor_critic.h"

namespace rlforge {

struct PpoGradInputs {
  int64_t batch = 0;
  const float* obs = nullptr;           // [B, obs_size], already normalised
  const int64_t* discrete = nullptr;    // [B] (Discrete heads)
  const float* continuous = nullptr;    // [B, A] (Gaussian heads)
  const float* old_logprobs = nullptr;  // [B]
  const float* old_values = nullptr;    // [B]
  const float* advantages = nullptr;    // [B], normalised already if wanted
  const float* returns = nullptr;       // [B]
  double clip = 0.2, clip_value = 0.0, vf_coef = 0.5, ent_coef = 0.0;
};

struct PpoGradResult {
  double policy_loss = 0, value_loss = 0, entropy = 0, approx_kl = 0, clipfrac = 0;
};

class FastPpoGrad {
 public:
  // Fails for what it does not cover (then use autograd): an activation
  // other than tanh or relu, or a module it cannot read.
  static absl::StatusOr<FastPpoGrad> Create(ActorCritic& model);

  // Loss of one minibatch; overwrites every parameter's gradient with its own.
  PpoGradResult LossAndGrad(const PpoGradInputs& in);

 private:
  struct Layer {
    int64_t in = 0, out = 0;
    const float* w = nullptr;  // [out, in]
    const float* b = nullptr;  // [out]
    float* dw = nullptr;
    float* db = nullptr;
  };
  struct Net {
    std::vector<Layer> layers;          // hidden layers, then the head
    std::vector<std::vector<float>> h;  // activations: h[0] input copy unused, h[l] after layer l
    std::vector<float> dh, dpre;        // scratch
  };
  FastPpoGrad() = default;
  // Fills net.h; returns the head's output [B, out].
  const float* Forward(Net& net, const float* x, int64_t batch);
  // dout [B, out] of the head -> parameter gradients.
  void Backward(Net& net, const float* x, int64_t batch, const float* dout);

  bool relu_ = false, discrete_ = true;
  int64_t obs_size_ = 0, action_size_ = 0;
  Net actor_, critic_;
  const float* log_std_ = nullptr;
  float* dlog_std_ = nullptr;
  std::vector<float> dhead_, dvalue_;
};

}  // namespace rlforge
