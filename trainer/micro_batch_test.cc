#include "trainer/micro_batch.h"

#include <gtest/gtest.h>

#include <limits>
#include <random>

#include "dist/local_group.h"
#include "trainer/dpo_loss.h"
#include "trainer/policy_loss.h"

namespace rlforge {
namespace {

constexpr int64_t kVocab = 29, kHidden = 32, kInter = 48, kLayers = 2;

models::Transformer TinyModel() {
  models::TransformerConfig c;
  c.vocab_size = kVocab;
  c.hidden_size = kHidden;
  c.intermediate_size = kInter;
  c.num_hidden_layers = kLayers;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = 64;
  c.tie_word_embeddings = true;
  torch::manual_seed(11);
  models::Transformer m(c);
  torch::NoGradGuard ng;
  for (auto& p : m->parameters()) p.normal_(0, 0.3);
  return m;
}

// `count` groups of `n` samples with varied prompt and response lengths and rollout logprobs.
std::vector<LmGroup> Groups(int count, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](int lo, int hi) { return lo + static_cast<int>(rng() % (hi - lo + 1)); };
  std::vector<LmGroup> groups(count);
  for (int g = 0; g < count; ++g) {
    groups[g].request_id = g;
    for (int t = uniform(1, 7); t > 0; --t) groups[g].prompt.push_back(uniform(0, kVocab - 1));
    for (int k = 0; k < n; ++k) {
      LmSample s;
      for (int t = uniform(1, 6); t > 0; --t) {
        s.tokens.push_back(uniform(0, kVocab - 1));
        s.logprobs.push_back(-2.5f - 0.25f * static_cast<float>(uniform(0, 8)));
      }
      groups[g].samples.push_back(s);
    }
  }
  return groups;
}

// A loss of the batch's logprobs, as a trainer role builds it.
using LossOf = std::function<torch::Tensor(const torch::Tensor& logp, const GroupBatch& b)>;

LossOf PolicyLossFn(PolicyLossKind kind, LossAggregation agg, bool token_advantages) {
  return [=](const torch::Tensor& logp, const GroupBatch& b) {
    LmPolicyLossOptions o;
    o.aggregation = agg;
    o.norm_length = 8;
    o.kl_beta = 0.05;
    if (kind == PolicyLossKind::kCispo) o.clip.clip_low = 1.0;
    LmPolicyLossInput in;
    in.logp = logp;
    in.old_logp = b.old_logp;
    in.mask = b.mask;
    in.ref_logp = (b.old_logp * 0.9).detach();
    const int64_t S = b.mask.size(0), R = b.mask.size(1);
    in.advantages = token_advantages ? torch::linspace(-1.5, 2.0, S * R).view({S, R})
                                     : torch::linspace(-1.0, 1.3, S);
    auto loss = CreatePolicyLoss(kind, o)->Compute(in);
    EXPECT_TRUE(loss.ok()) << loss.status();
    return loss->loss;
  };
}

LossOf DpoLossOf() {
  return [](const torch::Tensor& logp, const GroupBatch& b) {
    auto seq = SequenceLogprobs(logp, b.mask);
    EXPECT_TRUE(seq.ok());
    auto pairs = seq->view({-1, 2});
    DpoInput in;
    in.chosen_logp = pairs.select(1, 0);
    in.rejected_logp = pairs.select(1, 1);
    in.ref_chosen_logp = torch::full_like(in.chosen_logp, -9.0);
    in.ref_rejected_logp = torch::full_like(in.rejected_logp, -8.5);
    auto loss = ComputeDpoLoss(in, DpoOptions());
    EXPECT_TRUE(loss.ok()) << loss.status();
    return loss->loss;
  };
}

struct Gradients {
  std::vector<torch::Tensor> grads;  // per parameter
  torch::Tensor logp, entropy;
};

// The gradient of `loss` over `groups` with `micro_batches` passes, on one rank.
Gradients Run(const std::vector<LmGroup>& groups, int64_t micro_batches, const LossOf& loss) {
  Gradients out;
  absl::Status s = dist::RunLocalGroup(1, [&](dist::Communicator& comm) {
    auto model = ShardedModel::Create(TinyModel(), &comm, ShardedModel::Options());
    ASSERT_TRUE(model.ok()) << model.status();
    auto b = PackGroups(groups);
    ASSERT_TRUE(b.ok()) << b.status();
    (*model)->ZeroGrad();
    auto pass = MicroBatchedLogprobs(
        **model, *b, micro_batches, /*backward=*/true, /*entropy=*/true,
        [&](const torch::Tensor& logp) -> absl::StatusOr<torch::Tensor> { return loss(logp, *b); });
    ASSERT_TRUE(pass.ok()) << pass.status();
    out.logp = pass->logp.detach().clone();
    out.entropy = pass->entropy.clone();
    for (const auto& p : (*model)->module()->parameters()) out.grads.push_back(p.grad().clone());
  });
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

// Rounding bound of the two paths' difference: both compute the same sums in another order and
// with other GEMM shapes, so each element may differ by gamma_n = n u / (1 - n u) times the sum
// of its terms' magnitudes (Higham, 3.1), n the longest accumulation on the path from a logit to
// a weight's gradient: the batch's tokens, plus per layer the hidden, MLP and vocabulary
// inner products, compounded over the layers and the head (x2: forward and backward). The sum
// of magnitudes is bounded by that of the per-micro-batch gradients, |g_1| + ... + |g_k|, plus
// the gradient itself.
double Gamma(int64_t tokens) {
  const double u = std::numeric_limits<float>::epsilon() / 2;
  const double n = 2.0 * (kLayers + 1) * (static_cast<double>(tokens) + kHidden + kInter + kVocab);
  return n * u / (1 - n * u);
}

void ExpectSameGradients(const Gradients& whole, const Gradients& micro,
                         const std::vector<Gradients>& parts, int64_t tokens,
                         const torch::Tensor& mask) {
  ASSERT_EQ(whole.grads.size(), micro.grads.size());
  const double gamma = Gamma(tokens);
  for (size_t i = 0; i < whole.grads.size(); ++i) {
    torch::Tensor mass = whole.grads[i].abs();
    for (const Gradients& p : parts) mass = mass + p.grads[i].abs();
    // Terms inside one element may cancel: their magnitudes are bounded by the tensor's
    // largest gradient mass too.
    const torch::Tensor excess =
        (whole.grads[i] - micro.grads[i]).abs() - gamma * (mass + mass.max());
    EXPECT_LE(excess.max().item<double>(), 0) << "parameter " << i;
    EXPECT_GT(whole.grads[i].abs().max().item<double>(), 0) << "parameter " << i;
  }
  // Padding columns (mask 0) are read from another state in a slice: meaningless, compared out.
  const torch::Tensor on = mask > 0;
  const double scale = whole.logp.masked_select(on).abs().max().item<double>() + 1;
  EXPECT_LE((whole.logp - micro.logp).masked_select(on).abs().max().item<double>(), gamma * scale);
  EXPECT_LE((whole.entropy - micro.entropy).masked_select(on).abs().max().item<double>(),
            gamma * scale);
}

// The per-micro-batch gradients' magnitudes for the bound: each slice's loss term alone is not
// the loss's split, but its gradient through the same logprob gradient is (chain rule).
std::vector<Gradients> SliceGradients(const std::vector<LmGroup>& groups, int64_t k,
                                      const LossOf& loss) {
  auto b = PackGroups(groups);
  EXPECT_TRUE(b.ok());
  Gradients whole = Run(groups, 1, loss);
  // dloss/dlogp of the whole batch, replayed per slice as a linear loss.
  torch::Tensor leaf = whole.logp.clone().requires_grad_(true);
  loss(leaf, *b).backward();
  const torch::Tensor grad = leaf.grad();
  std::vector<Gradients> parts;
  int64_t row = 0;
  const int64_t G = static_cast<int64_t>(groups.size());
  for (int64_t j = 0; j < k; ++j) {
    std::vector<LmGroup> slice(groups.begin() + j * G / k, groups.begin() + (j + 1) * G / k);
    if (slice.empty()) continue;
    auto sb = PackGroups(slice);
    const int64_t rows = sb->targets.size(0);
    const torch::Tensor g = grad.narrow(0, row, rows).narrow(1, 0, sb->targets.size(1));
    parts.push_back(Run(
        slice, 1, [g](const torch::Tensor& logp, const GroupBatch&) { return (logp * g).sum(); }));
    row += rows;
  }
  return parts;
}

void CheckLoss(const LossOf& loss, int groups, int n, int64_t micro_batches) {
  const std::vector<LmGroup> g = Groups(groups, n, 7 + micro_batches);
  const Gradients whole = Run(g, 1, loss);
  const Gradients micro = Run(g, micro_batches, loss);
  auto b = PackGroups(g);
  const int64_t tokens = b->tokens.numel();
  ExpectSameGradients(whole, micro, SliceGradients(g, micro_batches, loss), tokens, b->mask);
}

TEST(MicroBatchTest, SliceHoldsItsGroupsRowsAndScoresThemAlike) {
  const std::vector<LmGroup> groups = Groups(4, 3, 1);
  auto b = PackGroups(groups);
  ASSERT_TRUE(b.ok());
  const GroupBatch s = SliceGroups(*b, 1, 3);
  auto alone = PackGroups({groups[1], groups[2]});
  EXPECT_TRUE(torch::equal(s.targets, alone->targets));
  EXPECT_TRUE(torch::equal(s.mask, alone->mask));
  EXPECT_TRUE(torch::equal(s.tokens, alone->tokens));
  EXPECT_TRUE(torch::equal(s.source, alone->source));
  EXPECT_TRUE(torch::equal(s.segments, alone->segments));
}

TEST(MicroBatchTest, CountRoundsToWholeGroups) {
  absl::Status s = dist::RunLocalGroup(1, [&](dist::Communicator& comm) {
    auto b = PackGroups(Groups(4, 3, 2));  // 12 sequences
    EXPECT_EQ(*MicroBatchCount(comm, *b, 0), 1);
    EXPECT_EQ(*MicroBatchCount(comm, *b, 12), 1);
    EXPECT_EQ(*MicroBatchCount(comm, *b, 6), 2);
    EXPECT_EQ(*MicroBatchCount(comm, *b, 5), 3);
    EXPECT_EQ(*MicroBatchCount(comm, *b, 1), 4);  // never less than a group
  });
  EXPECT_TRUE(s.ok()) << s;
}

// grpo, rloo (token mean), drgrpo (constant normaliser), gspo, cispo, lm_ppo (token advantages)
// and original GRPO's seq-mean-token-mean: the micro-batched gradient is the one-pass one.
TEST(MicroBatchTest, EveryPolicyLossGetsTheOnePassGradient) {
  for (PolicyLossKind kind :
       {PolicyLossKind::kPpoClip, PolicyLossKind::kGspo, PolicyLossKind::kCispo}) {
    for (LossAggregation agg : {LossAggregation::kTokenMean, LossAggregation::kSeqMeanTokenMean,
                                LossAggregation::kSeqMeanTokenSumNorm}) {
      SCOPED_TRACE(PolicyLossOf(kind).name + " " + std::string(ChoiceName(agg)));
      CheckLoss(PolicyLossFn(kind, agg, false), 5, 3, 3);
    }
  }
  SCOPED_TRACE("lm_ppo: token advantages");
  CheckLoss(PolicyLossFn(PolicyLossKind::kPpoClip, LossAggregation::kTokenMean, true), 5, 3, 2);
}

TEST(MicroBatchTest, DpoGetsTheOnePassGradient) { CheckLoss(DpoLossOf(), 6, 2, 4); }

// More micro-batches than groups: the spare passes add nothing.
TEST(MicroBatchTest, SparePassesAddNothing) {
  CheckLoss(PolicyLossFn(PolicyLossKind::kPpoClip, LossAggregation::kTokenMean, false), 2, 3, 4);
}

// Scoring only (reference, proximal logprobs): the same logprobs, no gradient.
TEST(MicroBatchTest, ScoringWithoutBackwardLeavesNoGradient) {
  const std::vector<LmGroup> g = Groups(3, 2, 5);
  absl::Status s = dist::RunLocalGroup(1, [&](dist::Communicator& comm) {
    auto model = ShardedModel::Create(TinyModel(), &comm, ShardedModel::Options());
    auto b = PackGroups(g);
    (*model)->ZeroGrad();
    auto one = MicroBatchedLogprobs(**model, *b, 1, false, false, nullptr);
    auto three = MicroBatchedLogprobs(**model, *b, 3, false, false, nullptr);
    ASSERT_TRUE(one.ok() && three.ok());
    const torch::Tensor on = b->mask > 0;
    EXPECT_LE(
        (one->logp - three->logp).masked_select(on).abs().max().item<double>(),
        Gamma(b->tokens.numel()) * (one->logp.masked_select(on).abs().max().item<double>() + 1));
    EXPECT_EQ((*model)->shard_grad().abs().max().item<double>(), 0);
  });
  EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace rlforge
