#include "trainer/lm_policy_state.h"

#include <gtest/gtest.h>

#include <random>

#include "trainer/lm_metrics.h"

namespace rlforge {
namespace {

models::Transformer RandomModel(bool value_head = false) {
  models::TransformerConfig c;
  c.vocab_size = 23;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = 64;
  models::Transformer m(c, value_head);
  torch::NoGradGuard ng;
  for (auto& p : m->parameters()) p.normal_(0, 0.3);
  return m;
}

// Groups of varied prompt and response lengths.
std::vector<LmGroup> RandomGroups(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](int lo, int hi) { return lo + static_cast<int>(rng() % (hi - lo + 1)); };
  std::vector<LmGroup> groups(3);
  for (size_t g = 0; g < groups.size(); ++g) {
    groups[g].request_id = static_cast<int64_t>(g);
    for (int t = uniform(1, 5); t > 0; --t) groups[g].prompt.push_back(uniform(0, 22));
    for (int k = 0; k < 4; ++k) {
      LmSample s;
      for (int t = uniform(1, 6); t > 0; --t) s.tokens.push_back(uniform(0, 22));
      s.logprobs.assign(s.tokens.size(), -0.5f);
      groups[g].samples.push_back(s);
    }
  }
  return groups;
}

// The reference: each sample alone, prompt + response as one causal sequence.
torch::Tensor ReferenceLogprobs(models::Transformer& m, const std::vector<LmGroup>& groups,
                                int64_t R) {
  std::vector<torch::Tensor> rows;
  for (const auto& g : groups) {
    for (const auto& s : g.samples) {
      std::vector<int64_t> ids(g.prompt.begin(), g.prompt.end());
      ids.insert(ids.end(), s.tokens.begin(), s.tokens.end());
      const int64_t T = static_cast<int64_t>(ids.size()), p = g.prompt.size();
      torch::Tensor tokens = torch::tensor(ids, torch::kLong).unsqueeze(0);
      torch::Tensor logp = torch::log_softmax(
          m->Logits(m->Hidden(tokens, torch::arange(T, torch::kLong).unsqueeze(0),
                              torch::zeros({1, T}, torch::kLong))),
          -1)[0];
      std::vector<torch::Tensor> row;
      for (size_t j = 0; j < s.tokens.size(); ++j) row.push_back(logp[p + j - 1][s.tokens[j]]);
      row.push_back(torch::zeros({R - static_cast<int64_t>(s.tokens.size())}));
      row[0] = row[0].reshape({1});
      for (size_t j = 1; j + 1 < row.size(); ++j) row[j] = row[j].reshape({1});
      rows.push_back(torch::cat(row));
    }
  }
  return torch::stack(rows);
}

TEST(PackGroupsTest, SharedPromptRowsGiveEachSamplesOwnLogprobsAndGradients) {
  torch::manual_seed(1);
  models::Transformer packed_model = RandomModel();
  models::Transformer ref_model = RandomModel();
  {
    torch::NoGradGuard ng;
    auto src = packed_model->parameters();
    auto dst = ref_model->parameters();
    for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
  }
  std::vector<LmGroup> groups = RandomGroups(7);
  auto batch = PackGroups(groups);
  ASSERT_TRUE(batch.ok()) << batch.status();
  const GroupBatch& b = *batch;
  // 3 rows (one per group), not 12.
  EXPECT_EQ(b.tokens.size(0), 3);
  EXPECT_EQ(b.mask.size(0), 12);
  auto logp = GroupTokenLogprobs(packed_model, b);
  ASSERT_TRUE(logp.ok()) << logp.status();
  torch::Tensor ref = ReferenceLogprobs(ref_model, groups, b.mask.size(1));
  EXPECT_TRUE(torch::allclose(*logp * b.mask, ref * b.mask, 1e-5, 1e-5))
      << (*logp * b.mask - ref * b.mask).abs().max().item<double>();
  EXPECT_EQ(b.mask.sum().item<double>(), [&] {
    double n = 0;
    for (const auto& g : groups)
      for (const auto& s : g.samples) n += static_cast<double>(s.tokens.size());
    return n;
  }());
  EXPECT_TRUE(torch::all(b.old_logp.masked_select(b.mask > 0) == -0.5f).item<bool>());

  // The gradient of any loss over the response tokens is the same: the shared prompt's
  // contributions from its n samples add up as they would over n copies.
  torch::Tensor w = torch::randn(b.mask.sizes()) * b.mask;
  (*logp * w).sum().backward();
  (ref * w).sum().backward();
  auto gp = packed_model->named_parameters();
  auto gr = ref_model->named_parameters();
  for (const auto& p : gp) {
    const torch::Tensor& a = p.value().grad();
    const torch::Tensor& r = gr[p.key()].grad();
    ASSERT_TRUE(a.defined() && r.defined()) << p.key();
    EXPECT_TRUE(torch::allclose(a, r, 1e-4, 1e-5))
        << p.key() << ": " << (a - r).abs().max().item<double>();
  }
}

TEST(PackGroupsTest, ValuesComeFromTheStateBeforeEachToken) {
  torch::manual_seed(2);
  models::Transformer critic = RandomModel(/*value_head=*/true);
  std::vector<LmGroup> groups = RandomGroups(9);
  auto b = PackGroups(groups);
  ASSERT_TRUE(b.ok());
  torch::Tensor v = critic->Values(GroupHidden(critic, *b));
  // Sample 0's first value is V(prompt): the same for every sample of the group.
  const int64_t n = static_cast<int64_t>(groups[0].samples.size());
  for (int64_t k = 1; k < n; ++k) EXPECT_FLOAT_EQ(v[k][0].item<float>(), v[0][0].item<float>());
  // And it equals the critic's value at the prompt's last token computed alone.
  const auto& prompt = groups[0].prompt;
  const int64_t p = static_cast<int64_t>(prompt.size());
  std::vector<int64_t> ids(prompt.begin(), prompt.end());
  torch::Tensor alone = critic->Values(critic->Hidden(torch::tensor(ids, torch::kLong).unsqueeze(0),
                                                      torch::arange(p).unsqueeze(0),
                                                      torch::zeros({1, p}, torch::kLong)));
  EXPECT_NEAR(v[0][0].item<float>(), alone[0][p - 1].item<float>(), 1e-5);
}

TEST(PackGroupsTest, EmptyPromptIsAnErrorNamingTheRequest) {
  std::vector<LmGroup> groups = RandomGroups(3);
  groups[1].prompt.clear();
  auto b = PackGroups(groups);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(std::string(b.status().message()).find("request 1 has an empty prompt"),
            std::string::npos);
}

// A batch moves to the trainer's device once per step; on the CPU that is no copy at all.
TEST(PackGroupsTest, ToDeviceKeepsEveryTensorAndCopiesNothingOnTheCpu) {
  auto b = PackGroups(RandomGroups(4));
  ASSERT_TRUE(b.ok()) << b.status();
  const GroupBatch moved = ToDevice(*b, torch::Device(torch::kCPU));
  for (torch::Tensor GroupBatch::*t :
       {&GroupBatch::tokens, &GroupBatch::positions, &GroupBatch::segments, &GroupBatch::shared,
        &GroupBatch::source, &GroupBatch::targets, &GroupBatch::mask, &GroupBatch::old_logp}) {
    ASSERT_TRUE((moved.*t).defined());
    EXPECT_TRUE((moved.*t).is_same((*b).*t));
  }
}

}  // namespace
}  // namespace rlforge
