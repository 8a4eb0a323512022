// DecodeGraphs on the CPU, where its padded static-buffer step runs eagerly: the sizes it pads
// to, the steps it takes, and what padding rows feed the model (the engine-level comparison
// with eager steps is EngineKernelLibraryTest.DecodeGraphsGenerateAsEagerSteps).
#include "rollout/decode_graphs.h"

#include <gtest/gtest.h>

#include <limits>

namespace rlforge {
namespace {

DecodeGraphOptions Options() {
  DecodeGraphOptions o;
  o.max_batch = 6, o.block_size = 4, o.max_blocks = 3, o.scratch_block = 9, o.max_context = 12;
  return o;
}

// Two decode rows: sequence 0 at position 5 (blocks 2, 7), sequence 1 at position 0 (block 4)
// with a fork's gap.
PagedBatch TwoRows() {
  PagedBatch b;
  b.block_size = 4;
  b.row_seq = {0, 1};
  b.row_context = {6, 1};
  b.row_slot = {7 * 4 + 1, 4 * 4};
  b.tables = {2, 7, 4};
  b.table_start = {0, 2, 3};
  b.seq_skip_from = {std::numeric_limits<int64_t>::max(), 3};
  b.seq_skip = {0, 1};
  return b;
}

HostSampling TwoDraws() {
  HostSampling s;
  s.temperature = {0.5f, 1}, s.top_p = {0.9f, 1}, s.top_k = {3, 0};
  s.seeds = {11, 12}, s.steps = {5, 0};
  return s;
}

TEST(DecodeGraphsTest, PadsToPowersOfTwoUpToTheMaxBatch) {
  EXPECT_EQ(DecodeGraphs::PaddedRows(1, 6), 1);
  EXPECT_EQ(DecodeGraphs::PaddedRows(2, 6), 2);
  EXPECT_EQ(DecodeGraphs::PaddedRows(3, 6), 4);
  EXPECT_EQ(DecodeGraphs::PaddedRows(5, 6), 6);
  EXPECT_EQ(DecodeGraphs::PaddedRows(6, 6), 6);
  EXPECT_EQ(DecodeGraphs::PaddedRows(9, 16), 16);
}

TEST(DecodeGraphsTest, ServesDecodeStepsWithinItsShapesOnly) {
  DecodeGraphs graphs(Options(), [](const DeviceStep&) { return kernel_ops::SampledRows{}; });
  const PagedBatch b = TwoRows();
  EXPECT_TRUE(graphs.Serves(b, 2));
  EXPECT_FALSE(graphs.Serves(b, 3)) << "a fork draws twice from one row";
  PagedBatch prefill = b;  // a sequence with two rows
  prefill.row_seq = {0, 0}, prefill.table_start = {0, 2};
  EXPECT_FALSE(graphs.Serves(prefill, 2));
  PagedBatch long_context = b;
  long_context.row_context[0] = 13;
  EXPECT_FALSE(graphs.Serves(long_context, 2));
  PagedBatch wide = b;
  wide.tables = {2, 7, 1, 3, 4}, wide.table_start = {0, 4, 5};
  EXPECT_FALSE(graphs.Serves(wide, 2));
}

// Live rows reach the step as given; padding rows decode token 0 at position 0 greedily, with
// their slot and whole table in the scratch block; their draws are dropped.
TEST(DecodeGraphsTest, PaddingRowsTouchTheScratchBlockOnly) {
  DeviceStep seen;
  int calls = 0;
  DecodeGraphs graphs(Options(), [&](const DeviceStep& in) {
    ++calls;
    seen = in;
    kernel_ops::SampledRows out;
    out.tokens = torch::arange(in.tokens.size(0), torch::kInt32) + 40;
    out.logprobs = -in.positions.to(torch::kFloat32);
    return out;
  });
  const PagedBatch b = TwoRows();
  absl::StatusOr<std::vector<SampledToken>> drawn =
      graphs.Run({17, 23}, {5, 0}, b, TwoDraws());  // pads 2 rows to 2
  ASSERT_TRUE(drawn.ok()) << drawn.status();
  PagedBatch three = b;  // a third sequence: pads 3 rows to 4
  three.row_seq.push_back(2), three.row_context.push_back(3), three.row_slot.push_back(6 * 4 + 2);
  three.tables.push_back(6), three.table_start.push_back(4);
  three.seq_skip_from.push_back(std::numeric_limits<int64_t>::max()), three.seq_skip.push_back(0);
  HostSampling sampling = TwoDraws();
  sampling.temperature.push_back(0), sampling.top_p.push_back(1), sampling.top_k.push_back(0);
  sampling.seeds.push_back(13), sampling.steps.push_back(2);
  drawn = graphs.Run({17, 23, 31}, {5, 0, 2}, three, sampling);
  ASSERT_TRUE(drawn.ok()) << drawn.status();
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(graphs.graphs(), 2);
  ASSERT_EQ(drawn->size(), 3u);
  EXPECT_EQ((*drawn)[2].token, 42);
  EXPECT_EQ((*drawn)[0].logprob, -5);

  ASSERT_EQ(seen.tokens.size(0), 4);
  auto ints = [](const torch::Tensor& t) {
    const torch::Tensor l = t.to(torch::kLong);
    return std::vector<int64_t>(l.data_ptr<int64_t>(), l.data_ptr<int64_t>() + l.numel());
  };
  const int64_t scratch_slot = 9 * 4, none = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(ints(seen.tokens), (std::vector<int64_t>{17, 23, 31, 0}));
  EXPECT_EQ(ints(seen.positions), (std::vector<int64_t>{5, 0, 2, 0}));
  EXPECT_EQ(ints(seen.index.row_seq), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(ints(seen.index.row_context), (std::vector<int64_t>{6, 1, 3, 1}));
  EXPECT_EQ(ints(seen.index.row_slot), (std::vector<int64_t>{29, 16, 26, scratch_slot}));
  EXPECT_EQ(ints(seen.index.tables), (std::vector<int64_t>{2, 7, 9, 4, 9, 9, 6, 9, 9, 9, 9, 9}));
  EXPECT_EQ(ints(seen.index.table_start), (std::vector<int64_t>{0, 3, 6, 9, 12}));
  EXPECT_EQ(ints(seen.index.seq_skip_from), (std::vector<int64_t>{none, 3, none, none}));
  EXPECT_EQ(ints(seen.index.seq_skip), (std::vector<int64_t>{0, 1, 0, 0}));
  EXPECT_EQ(seen.index.max_context, 12);
  EXPECT_FALSE(seen.logit_rows.defined());
  EXPECT_EQ(ints(seen.sampling.seeds), (std::vector<int64_t>{11, 12, 13, 0}));
  EXPECT_EQ(ints(seen.sampling.steps), (std::vector<int64_t>{5, 0, 2, 0}));
  EXPECT_EQ(seen.sampling.temperature[3].item<float>(), 0);  // greedy padding
}

TEST(DecodeGraphsTest, DropsItsGraphsWhenAParameterMoves) {
  DecodeGraphs graphs(Options(), [](const DeviceStep& in) {
    kernel_ops::SampledRows out;
    out.tokens = torch::zeros({in.tokens.size(0)}, torch::kInt32);
    out.logprobs = torch::zeros({in.tokens.size(0)});
    return out;
  });
  std::vector<torch::Tensor> params = {torch::zeros({3}), torch::zeros({2})};
  EXPECT_FALSE(graphs.ParametersMoved(params));
  ASSERT_TRUE(graphs.Run({17, 23}, {5, 0}, TwoRows(), TwoDraws()).ok());
  EXPECT_EQ(graphs.graphs(), 1);
  params[1].copy_(torch::ones({2}));  // in place: the graphs stay
  EXPECT_FALSE(graphs.ParametersMoved(params));
  EXPECT_EQ(graphs.graphs(), 1);
  params[1] = torch::ones({2});  // new storage
  EXPECT_TRUE(graphs.ParametersMoved(params));
  EXPECT_EQ(graphs.graphs(), 0);
  EXPECT_EQ(graphs.drops(), 1);
}

}  // namespace
}  // namespace rlforge
