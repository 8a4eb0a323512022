// FastPpoGrad against libtorch autograd on the same loss (ppo_loss.h).
#include "trainer/fast_ppo_grad.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "trainer/flat_adamw.h"
#include "trainer/ppo_loss.h"

namespace rlforge {
namespace {

struct Case {
  const char* name;
  bool discrete;
  Activation activation;
  double clip_value, ent_coef;
  bool normalize_obs;
};

class FastPpoGradTest : public ::testing::TestWithParam<Case> {};

TEST_P(FastPpoGradTest, LossAndEveryGradientMatchAutograd) {
  const Case& c = GetParam();
  torch::manual_seed(5);
  ActorCriticOptions o;
  o.obs_size = 5;
  o.discrete = c.discrete;
  o.action_size = 3;
  o.hidden_sizes = {32, 16};
  o.activation = c.activation;
  o.log_std_init = -0.3;
  o.normalize_obs = c.normalize_obs;
  ActorCritic model(o);
  FlatAdamW opt(model->parameters(), {});
  auto fast = FastPpoGrad::Create(model);
  ASSERT_TRUE(fast.ok()) << fast.status();

  const int64_t B = 200;
  auto raw = torch::randn({B, 5}) * 2 + 0.5;
  if (c.normalize_obs) model->UpdateObsStats(raw * 0.7);  // stats unlike the batch's
  auto obs = model->NormalizedObs(raw).contiguous();
  torch::Tensor actions;
  torch::Tensor old_logp, old_values;
  {
    torch::NoGradGuard g;
    auto out = model->Forward(raw);
    actions = c.discrete ? torch::randint(0, 3, {B}, torch::kLong)
                         : (out.logits_or_mean + torch::randn({B, 3}) * 0.7).contiguous();
    // Old log-probs off the current ones so ratios spread across both clip edges.
    old_logp = (model->LogProb(out, actions) + torch::randn({B}) * 0.3).contiguous();
    old_values = (out.value + torch::randn({B}) * 0.5).contiguous();
  }
  auto adv = torch::randn({B}).contiguous();
  auto returns = (torch::randn({B}) * 2).contiguous();
  const double clip = 0.2;

  // Autograd, from the raw observations as the learner's reference path does.
  opt.ZeroGrad();
  auto out = model->Forward(raw);
  auto [new_logp, ent] = model->LogProbAndEntropy(out, actions);
  PolicyLoss pg = ClippedPolicyLoss(new_logp, old_logp, adv, clip);
  auto v_loss = ValueLoss(out.value, old_values, returns, c.clip_value);
  auto entropy = ent.mean();
  auto loss = pg.loss - c.ent_coef * entropy + 0.5 * v_loss;
  loss.backward();
  auto want = opt.flat_grad().clone();
  ASSERT_GT(pg.clipfrac, 0.05) << "the case must exercise clipping";
  ASSERT_LT(pg.clipfrac, 0.95);

  // Poison the gradient buffer: the fast path must overwrite every entry.
  opt.flat_grad().fill_(123.0f);
  PpoGradInputs in;
  in.batch = B;
  in.obs = obs.data_ptr<float>();
  if (c.discrete) {
    in.discrete = actions.data_ptr<int64_t>();
  } else {
    in.continuous = actions.data_ptr<float>();
  }
  in.old_logprobs = old_logp.data_ptr<float>();
  in.old_values = old_values.data_ptr<float>();
  in.advantages = adv.data_ptr<float>();
  in.returns = returns.data_ptr<float>();
  in.clip = clip;
  in.clip_value = c.clip_value;
  in.vf_coef = 0.5;
  in.ent_coef = c.ent_coef;
  PpoGradResult got = fast->LossAndGrad(in);

  EXPECT_NEAR(got.policy_loss, pg.loss.item<double>(), 1e-5);
  EXPECT_NEAR(got.value_loss, v_loss.item<double>(), 1e-4);
  EXPECT_NEAR(got.entropy, entropy.item<double>(), 1e-5);
  EXPECT_NEAR(got.approx_kl, pg.approx_kl, 1e-6);
  EXPECT_NEAR(got.clipfrac, pg.clipfrac, 1e-6);  // torch takes the mean in float
  auto diff = (opt.flat_grad() - want).abs().max().item<double>();
  auto scale = want.abs().max().item<double>();
  EXPECT_GT(scale, 1e-3);
  EXPECT_LT(diff, 2e-5 * std::max(1.0, scale))
      << "max |grad difference| " << diff << " of " << scale;
  // Per parameter, so a wrong layer shows by name.
  int64_t off = 0;
  for (const auto& p : model->named_parameters()) {
    int64_t k = p.value().numel();
    auto d =
        (opt.flat_grad().narrow(0, off, k) - want.narrow(0, off, k)).abs().max().item<double>();
    EXPECT_LT(d, 2e-5 * std::max(1.0, scale)) << p.key();
    off += k;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Heads, FastPpoGradTest,
    ::testing::Values(Case{"categorical_tanh", true, Activation::kTanh, 0.0, 0.0, false},
                      Case{"categorical_relu_entropy_vclip", true, Activation::kRelu, 0.3, 0.05,
                           false},
                      Case{"gaussian_tanh_entropy", false, Activation::kTanh, 0.0, 0.01, true},
                      Case{"gaussian_relu_vclip", false, Activation::kRelu, 0.4, 0.0, false}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(FastPpoGradTest, RefusesWhatItDoesNotCover) {
  // Every activation (policy.activation, an enum) is covered; a model without gradient
  // buffers is not.
  ActorCriticOptions ok;
  ok.obs_size = 3;
  ActorCritic no_grads(ok);  // no FlatAdamW: no gradient buffers yet
  EXPECT_FALSE(FastPpoGrad::Create(no_grads).ok());
}

}  // namespace
}  // namespace rlforge
