#include "trainer/advantage_estimator.h"

#include <gtest/gtest.h>

#include "trainer/lm_losses.h"

namespace rlforge {
namespace {

// Two groups of four: [1, 0, 0, 1] (mean 0.5, unbiased std sqrt(1/3)) and [1, 1, 1, 1].
const std::vector<float> kRewards = {1, 0, 0, 1, 1, 1, 1, 1};

std::vector<float> Advantages(const std::string& algorithm, bool filter,
                              std::vector<int64_t>* kept = nullptr) {
  JobConfig c;
  c.job.algorithm = FindAlgorithm(algorithm);
  c.grpo.filter_degenerate = filter;
  auto est = CreateAdvantageEstimator(c, nullptr, nullptr);  // sample-level: no model, no ranks
  EXPECT_TRUE(est.ok()) << est.status();
  std::map<std::string, double> out;
  const torch::Tensor r = torch::tensor(kRewards);
  EXPECT_TRUE((*est)->Prepare(std::vector<LmGroup>(2), r, out).ok());
  EXPECT_EQ(out["degenerate_groups"], 1);
  if (kept != nullptr) *kept = (*est)->kept_groups();
  torch::Tensor a = (*est)->Rows(torch::arange(8, torch::kLong), 3).contiguous();
  EXPECT_EQ(a.dim(), 1);  // one advantage per sample
  return std::vector<float>(a.data_ptr<float>(), a.data_ptr<float>() + a.numel());
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << "sample " << i;
}

TEST(AdvantageEstimatorTest, GrpoDividesByTheGroupsStd) {
  const float a = 0.5f / (std::sqrt(1.0f / 3.0f) + 1e-6f);  // 0.866
  ExpectNear(Advantages("grpo", false), {a, -a, -a, a, 0, 0, 0, 0});
}

TEST(AdvantageEstimatorTest, DrGrpoOnlyCentres) {
  ExpectNear(Advantages("drgrpo", false), {0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0});
}

TEST(AdvantageEstimatorTest, RlooSubtractsTheMeanOfTheOthers) {
  // Sample 0: 1 - mean(0, 0, 1) = 2/3; sample 1: 0 - mean(1, 0, 1) = -2/3.
  ExpectNear(Advantages("rloo", false), {2.f / 3, -2.f / 3, -2.f / 3, 2.f / 3, 0, 0, 0, 0});
}

TEST(AdvantageEstimatorTest, FilterDegenerateDropsEqualRewardGroups) {
  std::vector<int64_t> kept;
  Advantages("grpo", true, &kept);
  EXPECT_EQ(kept, (std::vector<int64_t>{0}));
  Advantages("grpo", false, &kept);
  EXPECT_EQ(kept, (std::vector<int64_t>{0, 1}));
}

TEST(AdvantageEstimatorTest, LeaveOneOutByHand) {
  // Groups of 3: [3, 0, 0] -> 3 - 0, 0 - 1.5, 0 - 1.5.
  auto a = LeaveOneOutAdvantages(torch::tensor({3.f, 0.f, 0.f}), 3);
  ASSERT_TRUE(a.ok());
  ExpectNear(std::vector<float>(a->data_ptr<float>(), a->data_ptr<float>() + 3), {3, -1.5, -1.5});
  EXPECT_FALSE(LeaveOneOutAdvantages(torch::tensor({1.f, 2.f, 3.f}), 2).ok());
  EXPECT_FALSE(LeaveOneOutAdvantages(torch::tensor({1.f, 2.f}), 1).ok());
}

TEST(AdvantageEstimatorTest, DrGrpoLossSumsTokensOverTheBudget) {
  // Ratio 1 (logp == old_logp): each token's loss is -A. Responses of 2 and 3 tokens with
  // A = +0.5 and -0.5; budget 6: -(0.5 * 2 - 0.5 * 3) / (2 * 6) = 1/24. token-mean would
  // give -(1 - 1.5) / 5 = 0.1, weighting each token of the longer answer as much.
  const torch::Tensor logp = torch::zeros({2, 3});
  LmPolicyLossInput in;
  in.logp = logp;
  in.old_logp = logp;
  in.advantages = torch::tensor({0.5f, -0.5f});
  in.mask = torch::tensor({{1.f, 1.f, 0.f}, {1.f, 1.f, 1.f}});
  LmPolicyLossOptions o;
  o.aggregation = LossAggregation::kSeqMeanTokenSumNorm;
  o.norm_length = 6;
  auto dr = ComputeLmPolicyLoss(in, o);
  ASSERT_TRUE(dr.ok()) << dr.status();
  EXPECT_NEAR(dr->loss.item<double>(), 1.0 / 24, 1e-7);
  o.aggregation = LossAggregation::kTokenMean;
  EXPECT_NEAR(ComputeLmPolicyLoss(in, o)->loss.item<double>(), 0.1, 1e-7);
}

}  // namespace
}  // namespace rlforge
