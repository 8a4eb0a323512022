#include "trainer/ppo_learner.h"

#include <algorithm>
#include <numeric>

#include "trainer/lr_schedule.h"
#include "trainer/ppo_loss.h"

namespace rlforge {

ActorCriticOptions ActorCriticOptionsFor(const JobConfig& config, const proto::PolicySpec& spec) {
  ActorCriticOptions o;
  o.obs_size = spec.obs_size();
  o.discrete = spec.discrete();
  o.action_size = spec.action_size();
  o.hidden_sizes = config.policy.hidden_sizes;
  o.activation = config.policy.activation;
  o.log_std_init = config.policy.log_std_init;
  o.ortho_init = config.policy.ortho_init;
  o.normalize_obs = config.ppo.normalize_obs;
  o.clip_obs = config.ppo.clip_obs;
  return o;
}

PpoLearner::PpoLearner(const JobConfig& config, const proto::PolicySpec& spec)
    : config_(config), rng_(static_cast<uint64_t>(config.job.seed) * 7919 + 17) {
  // Weight init draws from torch's global generator: seed it for repeatable runs.
  torch::manual_seed(static_cast<uint64_t>(config.job.seed));
  model_ = ActorCritic(ActorCriticOptionsFor(config, spec));
  const TrainerOptions& t = config.trainer;
  optimizer_ = std::make_unique<FlatAdamW>(
      model_->parameters(),
      FlatAdamW::Options{t.lr, t.adam_beta1, t.adam_beta2, t.adam_eps, t.weight_decay});
}

std::map<std::string, double> PpoLearner::Update(const PpoBatch& batch, int64_t iteration,
                                                 int64_t num_iterations) {
  const PpoOptions& p = config_.ppo;
  const int64_t n = batch.obs.size(0);
  const int64_t minibatches = std::min<int64_t>(p.minibatches, n);
  const int64_t mb_size = n / minibatches;
  double lr = ScheduledLearningRate(config_.trainer, iteration - 1, num_iterations);
  optimizer_->set_lr(lr);
  double clip = p.clip_coef;
  if (p.anneal_clip) clip *= 1.0 - static_cast<double>(iteration - 1) / num_iterations;

  double sum_pg = 0, sum_v = 0, sum_ent = 0, sum_kl = 0, sum_clip = 0, sum_norm = 0;
  int64_t updates = 0, epochs_run = 0;
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  bool stop = false;
  torch::Tensor whole_adv;
  for (int64_t epoch = 0; epoch < p.epochs && !stop; ++epoch) {
    // One minibatch is the whole batch: its gradient does not depend on order,
    // so skip the shuffle and the gathers (and normalise advantages once).
    const bool whole = minibatches == 1;
    torch::Tensor perm;
    if (!whole) {
      std::shuffle(order.begin(), order.end(), rng_);
      perm = torch::from_blob(order.data(), {n}, torch::kLong).clone();
    } else if (epoch == 0 && p.normalize_advantages) {
      whole_adv = NormalizeAdvantages(batch.advantages);
    }
    double epoch_kl = 0;
    int64_t epoch_updates = 0;
    for (int64_t m = 0; m < minibatches; ++m) {
      torch::Tensor idx;
      auto pick = [&](const torch::Tensor& t) { return whole ? t : t.index_select(0, idx); };
      if (!whole) idx = perm.slice(0, m * mb_size, (m + 1) * mb_size);
      auto out = model_->Forward(pick(batch.obs));
      auto [new_logp, entropies] = model_->LogProbAndEntropy(out, pick(batch.actions));
      torch::Tensor adv;
      if (whole) {
        adv = p.normalize_advantages ? whole_adv : batch.advantages;
      } else {
        adv = pick(batch.advantages);
        if (p.normalize_advantages) adv = NormalizeAdvantages(adv);
      }
      PolicyLoss pg = ClippedPolicyLoss(new_logp, pick(batch.logprobs), adv, clip);
      auto v_loss = ValueLoss(out.value, pick(batch.values), pick(batch.returns), p.clip_value);
      auto entropy = entropies.mean();
      auto loss = pg.loss - p.ent_coef * entropy + p.vf_coef * v_loss;
      optimizer_->ZeroGrad();
      loss.backward();
      double norm = 0;
      if (config_.trainer.max_grad_norm > 0) {
        norm = optimizer_->ClipGradNorm(config_.trainer.max_grad_norm);
      }
      optimizer_->Step();
      sum_pg += pg.loss.item<double>();
      sum_v += v_loss.item<double>();
      sum_ent += entropy.item<double>();
      sum_kl += pg.approx_kl;
      sum_clip += pg.clipfrac;
      sum_norm += norm;
      epoch_kl += pg.approx_kl;
      ++updates;
      ++epoch_updates;
    }
    ++epochs_run;
    if (p.target_kl > 0 && epoch_kl / static_cast<double>(epoch_updates) > p.target_kl) stop = true;
  }
  model_->UpdateObsStats(batch.obs);
  ++version_;
  double u = static_cast<double>(std::max<int64_t>(updates, 1));
  std::map<std::string, double> m;
  m["policy_loss"] = sum_pg / u;
  m["value_loss"] = sum_v / u;
  m["entropy"] = sum_ent / u;
  m["approx_kl"] = sum_kl / u;
  m["clipfrac"] = sum_clip / u;
  m["grad_norm"] = sum_norm / u;
  m["lr"] = lr;
  m["clip_coef"] = clip;
  m["epochs"] = static_cast<double>(epochs_run);
  m["explained_variance"] = ExplainedVariance(batch.values, batch.returns);
  if (!model_->options().discrete) m["action_std"] = model_->log_std().exp().mean().item<double>();
  return m;
}

}  // namespace rlforge
