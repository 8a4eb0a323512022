// ActorCritic: the MLP policy and value function for control tasks.
//
// raw obs -> (optional) running normalisation -> actor MLP -> logits | mean
//                                              -> critic MLP -> value
//
// Categorical head for Discrete actions, diagonal Gaussian with a
// state-independent log std for Box actions. Orthogonal init as in the PPO
// implementation-details literature (sqrt(2) hidden, 0.01 policy, 1 value).
// The observation statistics are module buffers, so they travel with the
// weights and every holder of version v normalises exactly alike.
// Not thread-safe; one owner.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "config/control_options.h"
#include "proto/control.pb.h"

namespace rlforge {

struct ActorCriticOptions {
  int64_t obs_size = 0;
  bool discrete = true;
  int64_t action_size = 1;  // Discrete: number of actions; Box: action dimensions
  std::vector<int64_t> hidden_sizes = {64, 64};
  Activation activation = Activation::kTanh;
  double log_std_init = 0.0;
  bool ortho_init = true;
  bool normalize_obs = false;
  double clip_obs = 10.0;
};

// The network of a control job: the env's spec (from the sim) with policy.* and ppo.*'s
// observation settings. The trainer and every rollout worker build it alike.
ActorCriticOptions ActorCriticOptionsFor(const PolicyOptions& policy, const PpoOptions& ppo,
                                         const proto::PolicySpec& spec);

class ActorCriticImpl : public torch::nn::Module {
 public:
  explicit ActorCriticImpl(const ActorCriticOptions& options);

  struct Output {
    torch::Tensor logits_or_mean;  // [B, action_size]
    torch::Tensor value;           // [B]
  };
  Output Forward(const torch::Tensor& raw_obs);
  torch::Tensor Value(const torch::Tensor& raw_obs);

  // Log-probability [B] of `actions` (int64 [B] or float [B, A]) under `out`.
  torch::Tensor LogProb(const Output& out, const torch::Tensor& actions) const;
  torch::Tensor Entropy(const Output& out) const;  // [B]
  // Both at once (one log-softmax for categorical heads): {log-prob [B], entropy [B]}.
  std::pair<torch::Tensor, torch::Tensor> LogProbAndEntropy(const Output& out,
                                                            const torch::Tensor& actions) const;

  // Folds a batch of raw observations [B, obs] into the running statistics
  // (parallel Welford); no-op when normalisation is off.
  void UpdateObsStats(const torch::Tensor& raw_obs);

  // The observations the networks see: normalised and clipped when
  // normalisation is on, else `raw_obs` itself.
  torch::Tensor NormalizedObs(const torch::Tensor& raw_obs) const { return Normalize(raw_obs); }

  const ActorCriticOptions& options() const { return options_; }
  torch::Tensor log_std() const { return log_std_; }

 private:
  torch::Tensor Normalize(const torch::Tensor& raw_obs) const;

  ActorCriticOptions options_;
  torch::nn::Sequential actor_{nullptr}, critic_{nullptr};
  torch::Tensor log_std_;
  torch::Tensor obs_mean_, obs_var_, obs_count_;
};
TORCH_MODULE(ActorCritic);

// Every parameter and buffer, in a fixed order, as one flat float vector:
// the weight-sync format. LayoutHash covers names and shapes.
int64_t FlatSize(torch::nn::Module& m);
void FlattenInto(torch::nn::Module& m, float* out);
void LoadFlat(torch::nn::Module& m, const float* in);
uint64_t LayoutHash(torch::nn::Module& m);
// Each tensor of the flat vector, in its order: name and shape (the weight stream's manifest).
std::vector<std::pair<std::string, std::vector<int64_t>>> FlatLayout(torch::nn::Module& m);

}  // namespace rlforge
