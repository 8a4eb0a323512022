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

// The flat buffers take the parameters' dtype (and device): bf16 parameters stay bf16, each a
// view of the flat data, their gradients of the flat grad.
TEST(FlatAdamWTest, FlatBuffersTakeTheParametersDtype) {
  torch::Tensor a = torch::randn({3, 4}).to(torch::kBFloat16).requires_grad_(true);
  torch::Tensor b = torch::randn({5}).to(torch::kBFloat16).requires_grad_(true);
  const torch::Tensor a0 = a.detach().clone(), b0 = b.detach().clone();
  FlatAdamW opt({a, b}, {.lr = 0.1});
  EXPECT_EQ(opt.flat_data().scalar_type(), torch::kBFloat16);
  EXPECT_EQ(opt.flat_grad().scalar_type(), torch::kBFloat16);
  EXPECT_EQ(a.data_ptr(), opt.flat_data().data_ptr());
  EXPECT_TRUE(torch::equal(a, a0) && torch::equal(b, b0)) << "values kept";
  (a.sum() + b.sum()).backward();
  EXPECT_EQ(opt.flat_grad().sum().item<float>(), 17.0f) << "gradients land in the flat grad";
  opt.Step();
  EXPECT_FALSE(torch::equal(a, a0)) << "the step moved the parameters";
}

}  // namespace
}  // namespace rlforge
