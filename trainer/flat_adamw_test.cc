#include "trainer/flat_adamw.h"

#include <gtest/gtest.h>

namespace rlforge {
namespace {

torch::nn::Sequential Net() {
  return torch::nn::Sequential(torch::nn::Linear(3, 5), torch::nn::Tanh(), torch::nn::Linear(5, 2));
}

TEST(FlatAdamWTest, MatchesTorchAdamWStepForStep) {
  torch::manual_seed(0);
  auto a = Net();
  auto b = Net();
  {
    torch::NoGradGuard g;
    for (size_t i = 0; i < a->parameters().size(); ++i)
      b->parameters()[i].copy_(a->parameters()[i]);
  }
  torch::optim::AdamW ref(
      a->parameters(),
      torch::optim::AdamWOptions(1e-2).betas({0.9, 0.99}).eps(1e-5).weight_decay(0.1));
  FlatAdamW flat(b->parameters(), {1e-2, 0.9, 0.99, 1e-5, 0.1});
  for (int step = 0; step < 25; ++step) {
    auto x = torch::randn({8, 3});
    ref.zero_grad();
    a->forward(x).pow(2).sum().backward();
    ref.step();
    flat.ZeroGrad();
    b->forward(x).pow(2).sum().backward();
    flat.Step();
  }
  for (size_t i = 0; i < a->parameters().size(); ++i) {
    EXPECT_TRUE(torch::allclose(a->parameters()[i], b->parameters()[i], 1e-5, 1e-6)) << i;
  }
}

TEST(FlatAdamWTest, ClippingMatchesTorchAndGradsLiveInTheFlatBuffer) {
  torch::manual_seed(1);
  auto a = Net();
  auto b = Net();
  {
    torch::NoGradGuard g;
    for (size_t i = 0; i < a->parameters().size(); ++i)
      b->parameters()[i].copy_(a->parameters()[i]);
  }
  FlatAdamW flat(b->parameters(), {});
  auto x = torch::randn({4, 3}) * 10;
  a->forward(x).sum().backward();
  flat.ZeroGrad();
  b->forward(x).sum().backward();
  double ref_norm = torch::nn::utils::clip_grad_norm_(a->parameters(), 0.5);
  double norm = flat.ClipGradNorm(0.5);
  EXPECT_NEAR(norm, ref_norm, 1e-4 * ref_norm);
  for (size_t i = 0; i < a->parameters().size(); ++i) {
    EXPECT_TRUE(torch::allclose(a->parameters()[i].grad(), b->parameters()[i].grad(), 1e-5, 1e-6));
  }
  EXPECT_NEAR(flat.flat_grad().norm().item<double>(), 0.5, 1e-4);
}

}  // namespace
}  // namespace rlforge
