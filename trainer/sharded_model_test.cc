#include "trainer/sharded_model.h"

#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <vector>

#include "dist/local_group.h"
#include "trainer/flat_adamw.h"

namespace rlforge {
namespace {

bool g_tied = false;  // tied embeddings: one root unit instead of embed and head

models::TransformerConfig TinyConfig() {
  models::TransformerConfig c;
  c.vocab_size = 37;
  c.hidden_size = 16;
  c.intermediate_size = 25;  // a layer is 2000 values: padded when split in 3
  c.num_hidden_layers = 3;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = 8;
  c.max_position_embeddings = 64;
  c.tie_word_embeddings = g_tied;
  return c;
}

using Values = std::map<std::string, torch::Tensor>;

Values InitialValues() {
  torch::manual_seed(7);
  models::Transformer m(TinyConfig());
  Values v;
  for (auto& p : m->named_parameters()) v[p.key()] = p.value().detach().clone();
  return v;
}

models::Transformer ModelWith(const Values& values) {
  static std::mutex mu;  // module construction draws from the global generator
  std::lock_guard<std::mutex> l(mu);
  models::Transformer m(TinyConfig());
  torch::NoGradGuard ng;
  for (auto& p : m->named_parameters()) p.value().copy_(values.at(p.key()));
  return m;
}

struct TrainRun {
  std::vector<double> losses;
  Values final_values;
  int64_t held_bytes = 0;  // params + grads + AdamW state of rank 0 after the last step
  int64_t unsharded_bytes = 0, largest_unit_bytes = 0;
};

// Rows [begin, end) of `rows` that rank r of n takes: contiguous, sizes differ by at most one.
std::pair<int64_t, int64_t> Share(int64_t rows, int r, int n) {
  return {rows * r / n, rows * (r + 1) / n};
}

// 5 AdamW steps of next-token cross-entropy (token mean over the global batch), each step
// `micro` micro-batches of the 7-row batch split over the ranks.
TrainRun Train(int ranks, ShardedModel::Options options, int micro = 1) {
  const Values init = InitialValues();
  torch::manual_seed(3);
  const torch::Tensor tokens = torch::randint(0, 37, {7, 9}, torch::kLong);
  TrainRun out;
  std::mutex mu;
  absl::Status s = dist::RunLocalGroup(ranks, [&](dist::Communicator& comm) {
    auto sharded = ShardedModel::Create(ModelWith(init), &comm, options);
    ASSERT_TRUE(sharded.ok()) << sharded.status();
    ShardedModel& m = **sharded;
    FlatAdamW::Options ao;
    ao.lr = 1e-2;
    ao.weight_decay = 0.01;
    FlatAdamW adam(m.shard_data(), m.shard_grad(), ao);
    std::vector<double> losses;
    for (int step = 0; step < 5; ++step) {
      m.ZeroGrad();
      double loss_sum = 0;
      for (int k = 0; k < micro; ++k) {
        auto [mb0, mb1] = Share(7, k, micro);
        auto [r0, r1] = Share(mb1 - mb0, comm.rank(), comm.size());
        torch::Tensor rows = tokens.narrow(0, mb0 + r0, r1 - r0);
        const double global_tokens = static_cast<double>((mb1 - mb0) * 8 * micro);
        m.BeginForward();
        const int64_t B = rows.size(0);
        torch::Tensor pos = torch::arange(9, torch::kLong).expand({B, 9}).contiguous();
        torch::Tensor seg = torch::zeros({B, 9}, torch::kLong);
        torch::Tensor logits = m.module()->Logits(m.module()->Hidden(rows, pos, seg));
        torch::Tensor loss =
            torch::nn::functional::cross_entropy(
                logits.narrow(1, 0, 8).reshape({-1, 37}), rows.narrow(1, 1, 8).reshape({-1}),
                torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum)) /
            global_tokens;
        loss.backward();
        ASSERT_TRUE(m.FinishBackward().ok());
        torch::Tensor l = loss.detach().to(torch::kFloat).reshape({1});
        ASSERT_TRUE(comm.AllReduceSum(l)->Wait().ok());
        loss_sum += l.item<double>();
      }
      adam.ClipGradNorm(1.0, &comm);
      adam.Step();
      losses.push_back(loss_sum);
    }
    Values final_values;
    ASSERT_TRUE(m.GatherUnits([&](const ShardUnit& unit, const torch::Tensor& flat) {
                   for (const auto& p : unit.params) {
                     final_values[p.name] = flat.narrow(0, p.offset, p.numel).view(p.shape).clone();
                   }
                   return absl::OkStatus();
                 }).ok());
    if (comm.rank() == 0) {
      std::lock_guard<std::mutex> l(mu);
      out.losses = losses;
      out.final_values = final_values;
      out.held_bytes = m.HeldBytes() + adam.HeldBytes() - 2 * m.shard_data().numel() * 4;
      int64_t total = 0;
      for (const auto& u : m.units()) {
        total += u.numel;
        out.largest_unit_bytes = std::max(out.largest_unit_bytes, u.numel * 4 * 5);
      }
      out.unsharded_bytes = total * 4 * 5;  // params, grads, m, v, AdamW's scratch
    }
  });
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

void ExpectSameRun(const TrainRun& a, const TrainRun& ref) {
  ASSERT_EQ(a.losses.size(), ref.losses.size());
  for (size_t i = 0; i < ref.losses.size(); ++i) {
    EXPECT_NEAR(a.losses[i], ref.losses[i], 1e-5 * std::abs(ref.losses[i])) << "step " << i;
  }
  ASSERT_EQ(a.final_values.size(), ref.final_values.size());
  for (const auto& [name, want] : ref.final_values) {
    const torch::Tensor& got = a.final_values.at(name);
    // Relative in norm: Adam divides by sqrt(v), so an element whose gradient is tiny moves
    // by ~lr whatever the gradient's rounding; the tensor as a whole agrees far closer.
    EXPECT_LE((got - want).norm().item<double>(), 1e-5 * want.norm().item<double>()) << name;
  }
  EXPECT_NE(ref.final_values.begin()->second.sum().item<double>(),
            InitialValues().begin()->second.sum().item<double>())
      << "training moved nothing";
}

class ShardedModelTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { torch::set_num_threads(1); }
};

TEST_P(ShardedModelTest, MatchesOneRankLossesAndParameters) {
  const TrainRun ref = Train(1, {});
  ExpectSameRun(Train(GetParam(), {}), ref);
}

TEST_P(ShardedModelTest, MatchesOneRankWithTiedEmbeddings) {
  g_tied = true;
  const TrainRun ref = Train(1, {});
  const TrainRun run = Train(GetParam(), {});
  g_tied = false;
  ExpectSameRun(run, ref);
}

TEST_P(ShardedModelTest, MatchesOneRankWithGradientAccumulation) {
  const TrainRun ref = Train(1, {}, /*micro=*/2);
  ExpectSameRun(Train(GetParam(), {}, /*micro=*/2), ref);
}

TEST_P(ShardedModelTest, MatchesOneRankWhenKeptUntilBackwardAndWithoutPrefetch) {
  ShardedModel::Options o;
  o.reshard_after_forward = false;
  o.prefetch = false;
  const TrainRun ref = Train(1, {});
  ExpectSameRun(Train(GetParam(), o), ref);
}

TEST_P(ShardedModelTest, EachRankHoldsItsShareOfParametersGradientsAndOptimizerState) {
  const int n = GetParam();
  const TrainRun run = Train(n, {});
  EXPECT_LE(run.held_bytes, run.unsharded_bytes / n + run.largest_unit_bytes)
      << "held " << run.held_bytes << " of " << run.unsharded_bytes;
  if (n > 1) {
    EXPECT_LT(run.held_bytes, run.unsharded_bytes / n * 1.2);
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, ShardedModelTest, ::testing::Values(2, 3));

class ShardedModelPrecisionTest : public ::testing::TestWithParam<int> {};

TEST_P(ShardedModelPrecisionTest, Bf16ComputeStaysNearFp32) {
  torch::set_num_threads(1);
  ShardedModel::Options o;
  o.compute_dtype = torch::kBFloat16;
  const TrainRun bf16 = Train(GetParam(), o), fp32 = Train(GetParam(), {});
  bool differs = false;
  for (size_t i = 0; i < fp32.losses.size(); ++i) {
    EXPECT_NEAR(bf16.losses[i], fp32.losses[i], 0.02 * fp32.losses[i]) << "step " << i;
    differs = differs || bf16.losses[i] != fp32.losses[i];
  }
  EXPECT_TRUE(differs) << "bf16 computed nothing in bf16";
}

// One rank too: bf16 is not the one-rank fp32 layout.
INSTANTIATE_TEST_SUITE_P(Ranks, ShardedModelPrecisionTest, ::testing::Values(1, 2));

TEST(ShardedModelGatherTest, GatherUnitsReturnsTheValuesItWasBuiltWith) {
  torch::set_num_threads(1);
  const Values init = InitialValues();
  absl::Status s = dist::RunLocalGroup(3, [&](dist::Communicator& comm) {
    ShardedModel::Options o;
    o.trainable = false;
    auto m = ShardedModel::Create(ModelWith(init), &comm, o);
    ASSERT_TRUE(m.ok());
    size_t seen = 0;
    ASSERT_TRUE(
        (*m)->GatherUnits([&](const ShardUnit& unit, const torch::Tensor& flat) {
              for (const auto& p : unit.params) {
                EXPECT_TRUE(flat.narrow(0, p.offset, p.numel).view(p.shape).equal(init.at(p.name)))
                    << p.name;
                ++seen;
              }
              return absl::OkStatus();
            })
            .ok());
    EXPECT_EQ(seen, init.size());
    EXPECT_EQ((*m)->HeldBytes(), (*m)->shard_data().numel() * 4 * 2);
  });
  ASSERT_TRUE(s.ok()) << s;
}

// Options.device written out (the CPU here; a GPU on a CUDA build) trains as the default, to
// the bit, with one rank and with two.
TEST(ShardedModelDeviceTest, ExplicitCpuDeviceTrainsAsTheDefault) {
  torch::set_num_threads(1);
  ShardedModel::Options o;
  o.device = torch::Device(torch::kCPU);
  for (int ranks : {1, 2}) {
    const TrainRun want = Train(ranks, {}), got = Train(ranks, o);
    EXPECT_EQ(got.losses, want.losses) << ranks << " ranks";
    for (const auto& [name, w] : want.final_values) {
      EXPECT_TRUE(got.final_values.at(name).equal(w)) << name << ", " << ranks << " ranks";
    }
  }
}

// Shards, gradients, AdamW's moments and the parameters the module computes with are on
// Options.device; GatherUnits hands its sink CPU values, and on the CPU the shard itself (one
// rank, fp32) or the gathered buffer: no staging copy there.
TEST(ShardedModelDeviceTest, StateLivesOnTheDeviceAndGatherStagesOnlyOffTheCpu) {
  torch::set_num_threads(1);
  const Values init = InitialValues();
  const torch::Device cpu(torch::kCPU);
  for (const auto& [ranks, dtype] : std::vector<std::pair<int, torch::Dtype>>{
           {1, torch::kFloat32}, {1, torch::kBFloat16}, {2, torch::kFloat32}}) {
    SCOPED_TRACE(::testing::Message() << ranks << " ranks, " << dtype);
    absl::Status s = dist::RunLocalGroup(ranks, [&](dist::Communicator& comm) {
      ShardedModel::Options o;
      o.device = cpu;
      o.compute_dtype = dtype;
      auto made = ShardedModel::Create(ModelWith(init), &comm, o);
      ASSERT_TRUE(made.ok()) << made.status();
      ShardedModel& m = **made;
      FlatAdamW adam(m.shard_data(), m.shard_grad(), {});
      EXPECT_EQ(m.device(), cpu);
      for (const torch::Tensor* t :
           {&m.shard_data(), &m.shard_grad(), &adam.exp_avg(), &adam.exp_avg_sq()}) {
        EXPECT_EQ(t->device(), cpu);
      }
      const torch::Tensor rows = torch::randint(0, 37, {2, 5}, torch::kLong);
      m.BeginForward();
      torch::Tensor pos = torch::arange(5, torch::kLong).expand({2, 5}).contiguous();
      torch::Tensor h = m.module()->Hidden(rows, pos, torch::zeros({2, 5}, torch::kLong));
      for (const auto& p : m.module()->parameters()) {
        if (p.storage().nbytes() == 0) continue;  // not gathered now
        EXPECT_EQ(p.device(), cpu);
      }
      m.module()->Logits(h).sum().backward();
      ASSERT_TRUE(m.FinishBackward().ok());
      EXPECT_GT(m.shard_grad().abs().sum().item<double>(), 0);
      const bool resident = ranks == 1 && dtype == torch::kFloat32;
      ASSERT_TRUE(m.GatherUnits([&](const ShardUnit& unit, const torch::Tensor& flat) {
                     EXPECT_TRUE(flat.is_cpu() && flat.is_contiguous()) << unit.name;
                     if (resident && unit.name == "embed") {
                       EXPECT_EQ(flat.data_ptr(), m.shard_data().data_ptr()) << "a copy";
                     }
                     return absl::OkStatus();
                   }).ok());
      // GatherTo::kDevice: the same values, left on the device (the GPU weight transports').
      std::vector<torch::Tensor> staged, kept;
      ASSERT_TRUE(m.GatherUnits([&](const ShardUnit&, const torch::Tensor& flat) {
                     staged.push_back(flat.clone());
                     return absl::OkStatus();
                   }).ok());
      ASSERT_TRUE(m.GatherUnits(
                       [&](const ShardUnit& unit, const torch::Tensor& flat) {
                         EXPECT_EQ(flat.device(), m.device()) << unit.name;
                         EXPECT_TRUE(flat.is_contiguous()) << unit.name;
                         kept.push_back(flat.clone());
                         return absl::OkStatus();
                       },
                       ShardedModel::GatherTo::kDevice)
                      .ok());
      ASSERT_EQ(kept.size(), staged.size());
      for (size_t u = 0; u < kept.size(); ++u) EXPECT_TRUE(kept[u].equal(staged[u])) << u;
    });
    ASSERT_TRUE(s.ok()) << s;
  }
}

// A group of two whose tensors live elsewhere than the model: never asked for a collective.
class ElsewhereGroup : public dist::Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  torch::Device device() const override { return torch::kMeta; }
  std::unique_ptr<dist::Pending> AllGather(const torch::Tensor&, const torch::Tensor&) override {
    ADD_FAILURE() << "all_gather";
    return nullptr;
  }
  std::unique_ptr<dist::Pending> ReduceScatter(const torch::Tensor&,
                                               const torch::Tensor&) override {
    ADD_FAILURE() << "reduce_scatter";
    return nullptr;
  }
  std::unique_ptr<dist::Pending> AllReduceSum(const torch::Tensor&) override {
    ADD_FAILURE() << "all_reduce";
    return nullptr;
  }
  std::unique_ptr<dist::Pending> Broadcast(const torch::Tensor&, int) override {
    ADD_FAILURE() << "broadcast";
    return nullptr;
  }
};

TEST(ShardedModelDeviceTest, AModelOffItsGroupsDeviceIsRefused) {
  ElsewhereGroup group;
  auto made = ShardedModel::Create(ModelWith(InitialValues()), &group, {});
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.status().message().find(
                "sharded model on cpu, but its group of 2 ranks holds tensors on meta"),
            std::string::npos)
      << made.status();
}

}  // namespace
}  // namespace rlforge
