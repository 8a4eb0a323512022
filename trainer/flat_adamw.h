// FlatAdamW: AdamW over parameters that live in one contiguous buffer.
//
// params -> re-pointed as views of one flat data tensor, their grads as views
// of one flat grad tensor -> zero / clip / step are a few whole-buffer ops
//
// For the small networks of control tasks libtorch's per-op overhead, not
// arithmetic, dominates: torch::optim::AdamW costs ~10 ops per parameter
// tensor per step. Same update rule as torch::optim::AdamW (no amsgrad),
// checked against it in flat_adamw_test.cc. Owns the flat buffers; the module
// must outlive it. One thread.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "config/job_config.h"
#include "dist/communicator.h"

namespace rlforge {

class FlatAdamW {
 public:
  struct Options {
    double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  };
  // Moves `params` into one flat buffer of their (shared) dtype and device, views of which they
  // become, with their gradients in a second one.
  FlatAdamW(std::vector<torch::Tensor> params, Options options);
  // Adopts buffers that already are flat (a sharded model's shard_data and shard_grad).
  FlatAdamW(torch::Tensor data, torch::Tensor grad, Options options);

  void ZeroGrad() { grad_.zero_(); }
  // Scales all gradients so their global L2 norm is at most max_norm; returns
  // the norm before clipping (as torch::nn::utils::clip_grad_norm_).
  // With `comm`, the norm is that of the gradient split over its ranks (each holds a shard).
  double ClipGradNorm(double max_norm, dist::Communicator* comm = nullptr);
  void Step();
  void set_lr(double lr) { options_.lr = lr; }

  const torch::Tensor& flat_data() const { return data_; }
  const torch::Tensor& flat_grad() const { return grad_; }
  // Optimizer state (first and second moments), for checkpoints.
  const torch::Tensor& exp_avg() const { return m_; }
  const torch::Tensor& exp_avg_sq() const { return v_; }
  int64_t steps() const { return steps_; }
  void set_steps(int64_t steps) { steps_ = steps; }
  // Bytes of the state this object holds (params, grads, moments, scratch).
  int64_t HeldBytes() const;

 private:
  Options options_;
  std::vector<torch::Tensor> params_;
  torch::Tensor data_, grad_, m_, v_, denom_;
  int64_t steps_ = 0;
};

// The trainer section's betas, eps and weight decay, with learning rate `lr`.
FlatAdamW::Options AdamWOptions(const TrainerOptions& t, double lr);

}  // namespace rlforge
