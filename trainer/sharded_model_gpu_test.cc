// The sharded trainer on two GPUs (an NCCL group) against one rank on the CPU: same losses
// and same parameters after a few AdamW steps, within float tolerance. Ranks are forked
// processes (dist/forked_ranks.h); without a CUDA libtorch or two GPUs the test skips.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "dist/forked_ranks.h"
#include "trainer/flat_adamw.h"
#include "trainer/sharded_model.h"

namespace rlforge {
namespace {

models::TransformerConfig TinyConfig() {
  models::TransformerConfig c;
  c.vocab_size = 37;
  c.hidden_size = 16;
  c.intermediate_size = 25;  // odd sizes: units padded when split
  c.num_hidden_layers = 3;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = 8;
  c.max_position_embeddings = 64;
  return c;
}

struct TrainRun {
  std::vector<double> losses;
  std::map<std::string, torch::Tensor> final_values;  // on the CPU
};

// 3 AdamW steps of next-token cross-entropy (token mean over the 6-row batch), this rank
// taking its contiguous half of the rows; every rank draws the same model and batch.
TrainRun Train(dist::Communicator& comm, torch::Device device) {
  torch::manual_seed(7);
  models::Transformer model(TinyConfig());
  torch::manual_seed(3);
  const torch::Tensor tokens = torch::randint(0, 37, {6, 9}, torch::kLong);
  ShardedModel::Options o;
  o.device = device;
  auto made = ShardedModel::Create(model, &comm, o);
  EXPECT_TRUE(made.ok()) << made.status();
  if (!made.ok()) return {};
  ShardedModel& m = **made;
  FlatAdamW::Options ao;
  ao.lr = 1e-2;
  FlatAdamW adam(m.shard_data(), m.shard_grad(), ao);
  TrainRun out;
  const int64_t per = 6 / comm.size();
  torch::Tensor rows = tokens.narrow(0, comm.rank() * per, per).to(device);
  torch::Tensor pos = torch::arange(9, torch::kLong).expand({per, 9}).contiguous().to(device);
  torch::Tensor seg = torch::zeros({per, 9}, torch::TensorOptions(torch::kLong).device(device));
  for (int step = 0; step < 3; ++step) {
    m.ZeroGrad();
    m.BeginForward();
    torch::Tensor logits = m.module()->Logits(m.module()->Hidden(rows, pos, seg));
    torch::Tensor loss =
        torch::nn::functional::cross_entropy(
            logits.narrow(1, 0, 8).reshape({-1, 37}), rows.narrow(1, 1, 8).reshape({-1}),
            torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum)) /
        (6.0 * 8);
    loss.backward();
    EXPECT_TRUE(m.FinishBackward().ok());
    torch::Tensor l = loss.detach().reshape({1});
    EXPECT_TRUE(comm.AllReduceSum(l)->Wait().ok());
    out.losses.push_back(l.item<double>());
    adam.ClipGradNorm(1.0, &comm);
    adam.Step();
  }
  EXPECT_TRUE(m.GatherUnits([&](const ShardUnit& unit, const torch::Tensor& flat) {
                 for (const auto& p : unit.params) {
                   out.final_values[p.name] =
                       flat.narrow(0, p.offset, p.numel).view(p.shape).clone();
                 }
                 return absl::OkStatus();
               }).ok());
  return out;
}

TEST(ShardedModelGpuTest, TwoRanksOnGpusMatchOneRankOnTheCpu) {
  const std::string why = dist::WhyNoGpus(2);
  if (!why.empty()) GTEST_SKIP() << why;
  auto server = dist::StoreServer::Start("127.0.0.1");
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = (*server)->address();
  const std::vector<int> codes = dist::RunForked(2, [&](int rank) {
    dist::GroupOptions g;
    g.store_address = address;
    g.name = "gpu_trainer";
    g.rank = rank;
    g.size = 2;
    g.device = "cuda:" + std::to_string(rank);
    auto comm = dist::ConnectGroup(g);
    ASSERT_TRUE(comm.ok()) << comm.status();
    const TrainRun got = Train(**comm, torch::Device(torch::kCUDA, rank));
    if (rank != 0) return;
    auto one = dist::ConnectGroup(dist::GroupOptions{});  // a group of one on the CPU
    ASSERT_TRUE(one.ok()) << one.status();
    const TrainRun want = Train(**one, torch::kCPU);
    ASSERT_EQ(got.losses.size(), want.losses.size());
    for (size_t i = 0; i < want.losses.size(); ++i) {
      EXPECT_NEAR(got.losses[i], want.losses[i], 1e-4 * std::abs(want.losses[i])) << "step " << i;
    }
    ASSERT_EQ(got.final_values.size(), want.final_values.size());
    for (const auto& [name, w] : want.final_values) {
      const torch::Tensor& g = got.final_values.at(name);
      EXPECT_LE((g - w).norm().item<double>(), 1e-4 * w.norm().item<double>()) << name;
    }
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

}  // namespace
}  // namespace rlforge
