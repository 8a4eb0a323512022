#include "models/actor_critic.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "proto/tensor_frame.h"

namespace rlforge {

namespace {

torch::nn::Sequential Mlp(int64_t in, const std::vector<int64_t>& hidden, int64_t out,
                          Activation activation, bool ortho, double out_gain) {
  torch::nn::Sequential seq;
  int64_t width = in;
  auto init = [&](torch::nn::Linear& l, double gain) {
    if (ortho) {
      torch::NoGradGuard g;
      torch::nn::init::orthogonal_(l->weight, gain);
      torch::nn::init::zeros_(l->bias);
    }
  };
  for (int64_t h : hidden) {
    torch::nn::Linear l(width, h);
    init(l, std::sqrt(2.0));
    seq->push_back(l);
    if (activation == Activation::kRelu) {
      seq->push_back(torch::nn::ReLU());
    } else {
      seq->push_back(torch::nn::Tanh());
    }
    width = h;
  }
  torch::nn::Linear head(width, out);
  init(head, out_gain);
  seq->push_back(head);
  return seq;
}

}  // namespace

ActorCriticOptions ActorCriticOptionsFor(const PolicyOptions& policy, const PpoOptions& ppo,
                                         const proto::PolicySpec& spec) {
  ActorCriticOptions o;
  o.obs_size = spec.obs_size();
  o.discrete = spec.discrete();
  o.action_size = spec.action_size();
  o.hidden_sizes = policy.hidden_sizes;
  o.activation = policy.activation;
  o.log_std_init = policy.log_std_init;
  o.ortho_init = policy.ortho_init;
  o.normalize_obs = ppo.normalize_obs;
  o.clip_obs = ppo.clip_obs;
  return o;
}

ActorCriticImpl::ActorCriticImpl(const ActorCriticOptions& o) : options_(o) {
  actor_ = register_module(
      "actor", Mlp(o.obs_size, o.hidden_sizes, o.action_size, o.activation, o.ortho_init, 0.01));
  critic_ = register_module("critic",
                            Mlp(o.obs_size, o.hidden_sizes, 1, o.activation, o.ortho_init, 1.0));
  if (!o.discrete) {
    log_std_ = register_parameter("log_std", torch::full({o.action_size}, o.log_std_init));
  }
  obs_mean_ = register_buffer("obs_mean", torch::zeros({o.obs_size}, torch::kFloat64));
  obs_var_ = register_buffer("obs_var", torch::ones({o.obs_size}, torch::kFloat64));
  // Starts at a tiny count, as SB3's RunningMeanStd (epsilon), so the first
  // batch dominates without dividing by zero.
  obs_count_ = register_buffer("obs_count", torch::full({1}, 1e-4, torch::kFloat64));
}

torch::Tensor ActorCriticImpl::Normalize(const torch::Tensor& raw) const {
  if (!options_.normalize_obs) return raw;
  // From float32 copies: a rollout worker holds the statistics as the float32
  // weight-sync format carried them, and must normalise bit for bit alike.
  auto mean = obs_mean_.to(torch::kFloat32);
  auto std = (obs_var_.to(torch::kFloat32) + 1e-8f).sqrt();
  return ((raw - mean) / std).clamp(-options_.clip_obs, options_.clip_obs);
}

ActorCriticImpl::Output ActorCriticImpl::Forward(const torch::Tensor& raw_obs) {
  torch::Tensor x = Normalize(raw_obs);
  return {actor_->forward(x), critic_->forward(x).squeeze(-1)};
}

torch::Tensor ActorCriticImpl::Value(const torch::Tensor& raw_obs) {
  return critic_->forward(Normalize(raw_obs)).squeeze(-1);
}

torch::Tensor ActorCriticImpl::LogProb(const Output& out, const torch::Tensor& actions) const {
  if (options_.discrete) {
    auto logp = torch::log_softmax(out.logits_or_mean, -1);
    return logp.gather(-1, actions.to(torch::kLong).unsqueeze(-1)).squeeze(-1);
  }
  const auto& mean = out.logits_or_mean;
  auto var = torch::exp(2 * log_std_);
  auto lp = -(actions - mean).pow(2) / (2 * var) - log_std_ - 0.5 * std::log(2 * M_PI);
  return lp.sum(-1);
}

torch::Tensor ActorCriticImpl::Entropy(const Output& out) const {
  if (options_.discrete) {
    auto logp = torch::log_softmax(out.logits_or_mean, -1);
    return -(logp.exp() * logp).sum(-1);
  }
  auto per_dim = 0.5 + 0.5 * std::log(2 * M_PI) + log_std_;
  return per_dim.sum(-1).expand({out.logits_or_mean.size(0)});
}

std::pair<torch::Tensor, torch::Tensor> ActorCriticImpl::LogProbAndEntropy(
    const Output& out, const torch::Tensor& actions) const {
  if (!options_.discrete) return {LogProb(out, actions), Entropy(out)};
  auto logp = torch::log_softmax(out.logits_or_mean, -1);
  auto chosen = logp.gather(-1, actions.to(torch::kLong).unsqueeze(-1)).squeeze(-1);
  return {chosen, -(logp.exp() * logp).sum(-1)};
}

void ActorCriticImpl::UpdateObsStats(const torch::Tensor& raw_obs) {
  if (!options_.normalize_obs || raw_obs.size(0) == 0) return;
  torch::NoGradGuard g;
  auto x = raw_obs.to(torch::kFloat64);
  auto batch_mean = x.mean(0);
  auto batch_var = x.var(0, /*unbiased=*/false);
  double n = static_cast<double>(x.size(0));
  auto count = obs_count_;
  auto total = count + n;
  auto delta = batch_mean - obs_mean_;
  auto new_mean = obs_mean_ + delta * n / total;
  auto m2 = obs_var_ * count + batch_var * n + delta.pow(2) * count * n / total;
  obs_mean_.copy_(new_mean);
  obs_var_.copy_(m2 / total);
  obs_count_.copy_(total);
}

namespace {

template <typename Fn>
void ForEachTensor(torch::nn::Module& m, Fn fn) {
  for (const auto& p : m.named_parameters(/*recurse=*/true)) fn(p.key(), p.value());
  for (const auto& b : m.named_buffers(/*recurse=*/true)) fn(b.key(), b.value());
}

}  // namespace

int64_t FlatSize(torch::nn::Module& m) {
  int64_t n = 0;
  ForEachTensor(m, [&](const std::string&, const torch::Tensor& t) { n += t.numel(); });
  return n;
}

void FlattenInto(torch::nn::Module& m, float* out) {
  torch::NoGradGuard g;
  ForEachTensor(m, [&](const std::string&, const torch::Tensor& t) {
    auto f = t.detach().to(torch::kFloat32).contiguous();
    std::memcpy(out, f.data_ptr<float>(), static_cast<size_t>(f.numel()) * sizeof(float));
    out += f.numel();
  });
}

void LoadFlat(torch::nn::Module& m, const float* in) {
  torch::NoGradGuard g;
  ForEachTensor(m, [&](const std::string&, const torch::Tensor& t) {
    auto src = torch::from_blob(const_cast<float*>(in), t.sizes(), torch::kFloat32);
    t.copy_(src.to(t.dtype()));
    in += t.numel();
  });
}

std::vector<std::pair<std::string, std::vector<int64_t>>> FlatLayout(torch::nn::Module& m) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  ForEachTensor(m, [&](const std::string& name, const torch::Tensor& t) {
    out.emplace_back(name, t.sizes().vec());
  });
  return out;
}

uint64_t LayoutHash(torch::nn::Module& m) {
  std::string layout;
  ForEachTensor(m, [&](const std::string& name, const torch::Tensor& t) {
    absl::StrAppend(&layout, name);
    for (int64_t d : t.sizes()) absl::StrAppend(&layout, ":", d);
    absl::StrAppend(&layout, ";");
  });
  return Fnv1a64(layout.data(), layout.size());
}

}  // namespace rlforge
