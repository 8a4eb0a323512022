#include "trainer/flat_adamw.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace rlforge {

FlatAdamW::FlatAdamW(std::vector<torch::Tensor> params, Options options)
    : options_(options), params_(std::move(params)) {
  int64_t n = 0;
  for (const auto& p : params_) n += p.numel();
  // The parameters' dtype and device (fp32 on the CPU for the control policy).
  auto opts = params_.empty() ? torch::TensorOptions().dtype(torch::kFloat32)
                              : params_.front().options().requires_grad(false);
  data_ = torch::empty({n}, opts);
  grad_ = torch::zeros({n}, opts);
  m_ = torch::zeros({n}, opts);
  v_ = torch::zeros({n}, opts);
  torch::NoGradGuard g;
  int64_t off = 0;
  for (auto& p : params_) {
    int64_t k = p.numel();
    auto view = data_.narrow(0, off, k).view(p.sizes());
    view.copy_(p);
    p.set_data(view);
    // Backward accumulates in place into a defined grad, so the flat buffer fills up.
    p.mutable_grad() = grad_.narrow(0, off, k).view(p.sizes());
    off += k;
  }
}

FlatAdamW::FlatAdamW(torch::Tensor data, torch::Tensor grad, Options options)
    : options_(options), data_(std::move(data)), grad_(std::move(grad)) {
  m_ = torch::zeros_like(data_);
  v_ = torch::zeros_like(data_);
}

double FlatAdamW::ClipGradNorm(double max_norm, dist::Communicator* comm) {
  double norm = 0;
  if (comm == nullptr || comm->size() == 1) {
    norm = grad_.norm().item<double>();
  } else {
    const double local = grad_.norm().item<double>();  // no copy of the gradient
    torch::Tensor sq = torch::full({1}, local * local,
                                   torch::TensorOptions(torch::kDouble).device(comm->device()));
    absl::Status s = comm->AllReduceSum(sq)->Wait();
    if (!s.ok()) throw std::runtime_error(std::string(s.message()));
    norm = std::sqrt(sq.item<double>());
  }
  double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0) grad_.mul_(coef);
  return norm;
}

void FlatAdamW::Step() {
  torch::NoGradGuard g;
  ++steps_;
  const Options& o = options_;
  if (o.weight_decay != 0) data_.mul_(1.0 - o.lr * o.weight_decay);
  m_.mul_(o.beta1).add_(grad_, 1.0 - o.beta1);
  v_.mul_(o.beta2).addcmul_(grad_, grad_, 1.0 - o.beta2);
  double bias1 = 1.0 - std::pow(o.beta1, static_cast<double>(steps_));
  double bias2 = 1.0 - std::pow(o.beta2, static_cast<double>(steps_));
  // Into a kept buffer: a fresh one per step costs page faults over the whole model.
  if (!denom_.defined()) denom_ = torch::empty_like(v_);
  torch::sqrt_out(denom_, v_).div_(std::sqrt(bias2)).add_(o.eps);
  data_.addcdiv_(m_, denom_, -o.lr / bias1);
}

int64_t FlatAdamW::HeldBytes() const {
  int64_t bytes = 0;
  for (const torch::Tensor* t : {&data_, &grad_, &m_, &v_, &denom_}) {
    if (t->defined()) bytes += t->numel() * static_cast<int64_t>(t->element_size());
  }
  return bytes;
}

FlatAdamW::Options AdamWOptions(const TrainerOptions& t, double lr) {
  FlatAdamW::Options o;
  o.lr = lr;
  o.beta1 = t.adam_beta1;
  o.beta2 = t.adam_beta2;
  o.eps = t.adam_eps;
  o.weight_decay = t.weight_decay;
  return o;
}

}  // namespace rlforge
