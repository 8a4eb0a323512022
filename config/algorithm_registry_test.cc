#include "config/algorithm_registry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/role_names.h"
#include "config/job_config.h"
#include "config/policy_loss_registry.h"

namespace rlforge {
namespace {

std::string Errors(const LoadedJob& j) { return config::FormatErrors(j.errors); }

TEST(AlgorithmRegistryTest, EntriesAreConsistent) {
  std::set<std::string> names, sections;
  for (const config::Field& f : JobSchema().fields) sections.insert(f.name);
  const std::set<std::string> roles = {kEchoRole, kTrainerRole, kRolloutRole, kRewardRole};
  for (const AlgorithmSpec& a : Algorithms()) {
    SCOPED_TRACE(a.name);
    EXPECT_TRUE(names.insert(a.name).second) << "duplicate name";
    EXPECT_FALSE(a.summary.empty());
    EXPECT_EQ(FindAlgorithm(a.name), &a);
    // Exactly the on-policy LM algorithms have an advantage estimator and a loss default.
    const bool lm_rl = a.family == AlgorithmFamily::kLmRl;
    EXPECT_EQ(lm_rl, a.advantage != AdvantageKind::kNone);
    EXPECT_EQ(lm_rl, a.default_policy_loss.has_value());
    for (const std::string& s : a.sections) EXPECT_TRUE(sections.count(s)) << s;
    for (const std::string& r : a.roles) EXPECT_TRUE(roles.count(r)) << r;
    EXPECT_FALSE(a.roles.empty());
    // The capability flags agree with the family and the sections they stand for.
    const bool dpo = a.family == AlgorithmFamily::kDpo;
    EXPECT_EQ(a.lm_engines, lm_rl || dpo);
    EXPECT_EQ(a.lm_engines, a.Reads("engine"));
    EXPECT_EQ(a.async_rollout, lm_rl || a.family == AlgorithmFamily::kControlPpo);
    EXPECT_EQ(a.has_critic, a.Reads("critic") || a.Reads("ppo"));
    EXPECT_EQ(a.needs_reference, dpo);
    EXPECT_EQ(a.uses_groups, a.advantage == AdvantageKind::kGroupNorm ||
                                 a.advantage == AdvantageKind::kGroupMean ||
                                 a.advantage == AdvantageKind::kLeaveOneOut);
    for (const std::string& r : a.roles) EXPECT_TRUE(a.Starts(r)) << r;
  }
  EXPECT_EQ(FindAlgorithm("GRPO"), nullptr);
}

TEST(AlgorithmRegistryTest, AcceptedNamesComeFromTheTable) {
  for (const std::string& name : AlgorithmNames()) {
    LoadedJob j = LoadJobText("job: {algorithm: " + name + "}\n", "t.yaml");
    ASSERT_TRUE(j.ok()) << name << ": " << Errors(j);
    EXPECT_EQ(j.config.job.algorithm->name, name);
  }
  LoadedJob bad = LoadJobText("job: {algorithm: lm_ppp}\n", "t.yaml");
  ASSERT_EQ(bad.errors.size(), 1u);
  EXPECT_NE(bad.errors[0].message.find("did you mean lm_ppo?"), std::string::npos)
      << bad.errors[0].message;
}

TEST(AlgorithmRegistryTest, LossAggregationDefaultsToTheAlgorithms) {
  for (const AlgorithmSpec& a : Algorithms()) {
    if (a.family != AlgorithmFamily::kLmRl) continue;
    SCOPED_TRACE(a.name);
    LoadedJob j = LoadJobText("job: {algorithm: " + a.name + "}\n", "t.yaml");
    ASSERT_TRUE(j.ok()) << Errors(j);
    EXPECT_EQ(j.config.grpo.loss_aggregation, a.default_loss_aggregation);
    // The resolved config states the value, not "auto"; an explicit choice wins.
    EXPECT_NE(ResolvedYaml(j.config).find(std::string("loss_aggregation: ") +
                                          ChoiceName(a.default_loss_aggregation)),
              std::string::npos);
    LoadedJob set = LoadJobText(
        "job: {algorithm: " + a.name + "}\nlm_rl: {loss_aggregation: seq-mean-token-mean}\n",
        "t.yaml");
    EXPECT_EQ(set.config.grpo.loss_aggregation, LossAggregation::kSeqMeanTokenMean);
  }
}

TEST(AlgorithmRegistryTest, PolicyLossesAreConsistent) {
  std::set<std::string> names;
  std::set<PolicyLossKind> kinds;
  for (const PolicyLossSpec& l : PolicyLosses()) {
    SCOPED_TRACE(l.name);
    EXPECT_TRUE(names.insert(l.name).second) << "duplicate name";
    EXPECT_TRUE(kinds.insert(l.kind).second) << "duplicate kind";
    EXPECT_FALSE(l.summary.empty());
    EXPECT_EQ(FindPolicyLoss(l.name), &l);
    EXPECT_EQ(&PolicyLossOf(l.kind), &l);
    EXPECT_NE(l.name, "auto");
  }
  EXPECT_EQ(PolicyLosses().front().kind, PolicyLossKind::kPpoClip);  // the algorithms' default
  EXPECT_EQ(FindPolicyLoss("GSPO"), nullptr);
}

// lm_rl.policy_loss: auto resolves to the algorithm's default, and loss_aggregation: auto to the
// loss's default where it has one (gspo: seq-mean-token-mean), else the algorithm's; the
// resolved config states both; explicit choices win.
TEST(AlgorithmRegistryTest, PolicyLossDefaultsToTheAlgorithms) {
  for (const AlgorithmSpec& a : Algorithms()) {
    if (a.family != AlgorithmFamily::kLmRl) continue;
    SCOPED_TRACE(a.name);
    LoadedJob j = LoadJobText("job: {algorithm: " + a.name + "}\n", "t.yaml");
    ASSERT_TRUE(j.ok()) << Errors(j);
    ASSERT_TRUE(j.config.grpo.policy_loss.has_value());
    EXPECT_EQ(*j.config.grpo.policy_loss, *a.default_policy_loss);
    EXPECT_NE(
        ResolvedYaml(j.config).find("policy_loss: " + PolicyLossOf(*a.default_policy_loss).name),
        std::string::npos);
    for (const PolicyLossSpec& l : PolicyLosses()) {
      LoadedJob set = LoadJobText(
          "job: {algorithm: " + a.name + "}\nlm_rl: {policy_loss: " + l.name + "}\n", "t.yaml");
      ASSERT_TRUE(set.ok()) << l.name << ": " << Errors(set);
      EXPECT_EQ(*set.config.grpo.policy_loss, l.kind);
      EXPECT_EQ(set.config.grpo.loss_aggregation,
                l.default_loss_aggregation.value_or(a.default_loss_aggregation));
      LoadedJob both =
          LoadJobText("job: {algorithm: " + a.name + "}\nlm_rl: {policy_loss: " + l.name +
                          ", loss_aggregation: seq-mean-token-sum}\n",
                      "t.yaml");
      EXPECT_EQ(both.config.grpo.loss_aggregation, LossAggregation::kSeqMeanTokenSum);
    }
  }
}

TEST(AlgorithmRegistryTest, PolicyLossErrorsNameTheKey) {
  LoadedJob typo = LoadJobText("job: {algorithm: grpo}\nlm_rl: {policy_loss: gpso}\n", "t.yaml");
  ASSERT_EQ(typo.errors.size(), 1u) << Errors(typo);
  EXPECT_EQ(typo.errors[0].key, "lm_rl.policy_loss");
  EXPECT_NE(typo.errors[0].message.find("did you mean gspo?"), std::string::npos) << Errors(typo);
  LoadedJob off = LoadJobText(
      "job: {algorithm: grpo}\nlm_rl: {policy_loss: gspo, off_policy: tis}\n", "t.yaml");
  ASSERT_EQ(off.errors.size(), 1u) << Errors(off);
  EXPECT_EQ(off.errors[0].ToString(),
            "t.yaml:2:28: lm_rl.off_policy: tis corrects the token-level clipped loss (policy_loss "
            "ppo_clip); policy_loss gspo has no off-policy correction (set none)");
  LoadedJob dual =
      LoadJobText("job: {algorithm: rloo}\nlm_rl: {policy_loss: gspo, dual_clip: 3}\n", "t.yaml");
  ASSERT_EQ(dual.errors.size(), 1u) << Errors(dual);
  EXPECT_EQ(dual.errors[0].key, "lm_rl.dual_clip");
  EXPECT_NE(dual.errors[0].message.find("policy_loss gspo has none (set 0)"), std::string::npos)
      << Errors(dual);
  // clip_low 1 would make the ratio's lower bound 0: an error for every loss whose table entry
  // does not read it as "no lower bound".
  for (const PolicyLossSpec& l : PolicyLosses()) {
    LoadedJob low = LoadJobText(
        "job: {algorithm: grpo}\nlm_rl: {policy_loss: " + l.name + ", clip_low: 1}\n", "t.yaml");
    if (l.clip_low_one_unbounded) {
      EXPECT_TRUE(low.ok()) << l.name << ": " << Errors(low);
      continue;
    }
    ASSERT_EQ(low.errors.size(), 1u) << Errors(low);
    EXPECT_EQ(low.errors[0].key, "lm_rl.clip_low");
    EXPECT_NE(low.errors[0].message.find("policy_loss " + l.name + " needs clip_low < 1"),
              std::string::npos)
        << Errors(low);
  }
}

TEST(AlgorithmRegistryTest, GroupEstimatorsNeedTwoSamplesPerPrompt) {
  for (const AlgorithmSpec& a : Algorithms()) {
    if (a.family != AlgorithmFamily::kLmRl) continue;
    LoadedJob j =
        LoadJobText("job: {algorithm: " + a.name + "}\nlm_rl:\n  group_size: 1\n", "t.yaml");
    if (!a.uses_groups) {
      EXPECT_TRUE(j.ok()) << a.name << Errors(j);
      continue;
    }
    ASSERT_EQ(j.errors.size(), 1u) << a.name << Errors(j);
    EXPECT_EQ(j.errors[0].ToString(),
              "t.yaml:3:3: lm_rl.group_size: " + a.name +
                  "'s advantage compares the samples of a group, which needs at least 2 "
                  "samples per prompt, got 1");
  }
  EXPECT_TRUE(FindAlgorithm("grpo")->uses_groups);
  EXPECT_FALSE(FindAlgorithm("lm_ppo")->uses_groups);
}

TEST(AlgorithmRegistryTest, AnotherAlgorithmsSectionIsAnError) {
  LoadedJob j = LoadJobText("job: {algorithm: grpo}\nppo:\n  epochs: 3\n", "t.yaml");
  ASSERT_EQ(j.errors.size(), 1u) << Errors(j);
  EXPECT_EQ(j.errors[0].ToString(),
            "t.yaml:2:1: ppo: job.algorithm grpo does not read this section (it reads: rollout, "
            "engine, lm_rl, reward, model, data, weights); remove it");
  // Shared sections and the algorithm's own are fine.
  EXPECT_TRUE(
      LoadJobText("job: {algorithm: lm_ppo}\ncritic: {lr: 1e-3}\ntrainer: {lr: 1e-5}\n", "t.yaml")
          .ok());
  EXPECT_FALSE(LoadJobText("job: {algorithm: grpo}\ncritic: {lr: 1e-3}\n", "t.yaml").ok());
}

// issue 35: a section the algorithm never reads passed validate when it held only defaults
// (`critic: {lr: 5e-4}`, `env: {id: CartPole-v1}` in a grpo job), and did nothing.
TEST(AlgorithmRegistryTest, AnotherAlgorithmsSectionAtItsDefaultsIsStillAnError) {
  for (const char* text : {"critic: {lr: 5e-4}\n", "env: {id: CartPole-v1}\n", "sft: {}\n"}) {
    LoadedJob j = LoadJobText(std::string("job: {algorithm: grpo}\n") + text, "t.yaml");
    ASSERT_EQ(j.errors.size(), 1u) << text << Errors(j);
    EXPECT_NE(j.errors[0].ToString().find("t.yaml:2:1: "), std::string::npos) << Errors(j);
    EXPECT_NE(j.errors[0].ToString().find(": job.algorithm grpo does not read this section"),
              std::string::npos)
        << Errors(j);
  }
}

// The resolved config (what actors and --resume load) leaves out the sections the algorithm
// does not read, so that it loads again under the rule above, for every algorithm.
TEST(AlgorithmRegistryTest, ResolvedConfigHoldsOnlyTheSectionsTheAlgorithmReads) {
  for (const AlgorithmSpec& a : Algorithms()) {
    LoadedJob j = LoadJobText("job: {algorithm: " + a.name + "}\n", "t.yaml");
    ASSERT_TRUE(j.ok()) << a.name << Errors(j);
    const std::string text = ResolvedYaml(j.config);
    LoadedJob again = LoadJobText(text, "resolved");
    EXPECT_TRUE(again.ok()) << a.name << Errors(again) << text;
    EXPECT_EQ(ResolvedYaml(again.config), text) << a.name;
    const YAML::Node tree = YAML::Load(text);
    for (const char* shared : {"job", "controller", "launch", "checkpoint", "trainer"}) {
      EXPECT_TRUE(tree[shared].IsDefined()) << a.name << " " << shared;
    }
    for (const char* section :
         {"echo", "env", "sim", "rollout", "policy", "ppo", "weights", "engine", "lm_rl", "critic",
          "dpo", "reward", "model", "data", "sft"}) {
      const bool reads =
          std::find(a.sections.begin(), a.sections.end(), section) != a.sections.end();
      EXPECT_EQ(tree[section].IsDefined(), reads) << a.name << " " << section;
    }
  }
}

TEST(AlgorithmRegistryTest, EngineFleetsUpTo64AreAcceptedForEveryLmJob) {
  for (const char* algo : {"grpo", "lm_ppo", "dpo"}) {
    for (int workers : {2, 3, 64}) {
      LoadedJob j = LoadJobText(
          absl::StrCat("job: {algorithm: ", algo, "}\nrollout: {workers: ", workers, "}\n"),
          "t.yaml");
      EXPECT_TRUE(j.errors.empty()) << algo << " " << workers << ": " << Errors(j);
    }
  }
  LoadedJob big = LoadJobText("job: {algorithm: dpo}\nrollout: {workers: 65}\n", "t.yaml");
  ASSERT_EQ(big.errors.size(), 1u) << Errors(big);
  EXPECT_EQ(big.errors[0].key, "rollout.workers");
  EXPECT_NE(big.errors[0].ToString().find("at most 64 rollout engines"), std::string::npos)
      << Errors(big);
  EXPECT_NE(big.errors[0].ToString().find("got 65"), std::string::npos) << Errors(big);
  // Control PPO runs many rollout workers; reward workers scale for every LM job.
  EXPECT_TRUE(LoadJobText("job: {algorithm: ppo}\nrollout: {workers: 65}\n", "t.yaml").ok());
  EXPECT_TRUE(LoadJobText("job: {algorithm: grpo}\nreward: {workers: 3}\n", "t.yaml").ok());
}

TEST(AlgorithmRegistryTest, MaxStalenessIsForRlWithRolloutWorkersOnly) {
  for (const char* algo : {"grpo", "drgrpo", "rloo", "lm_ppo", "ppo"}) {
    LoadedJob j = LoadJobText(
        absl::StrCat("job: {algorithm: ", algo, "}\nrollout: {max_staleness: 2}\n"), "t.yaml");
    EXPECT_TRUE(j.errors.empty()) << algo << ": " << Errors(j);
  }
  for (const char* algo : {"dpo"}) {
    LoadedJob j = LoadJobText(
        absl::StrCat("job: {algorithm: ", algo, "}\nrollout: {max_staleness: 1}\n"), "t.yaml");
    ASSERT_EQ(j.errors.size(), 1u) << algo << ": " << Errors(j);
    EXPECT_EQ(j.errors[0].key, "rollout.max_staleness");
    EXPECT_NE(j.errors[0].ToString().find(absl::StrCat("job.algorithm ", algo)), std::string::npos)
        << Errors(j);
  }
  for (const char* algo : {"grpo", "ppo"}) {
    LoadedJob neg = LoadJobText(
        absl::StrCat("job: {algorithm: ", algo, "}\nrollout: {max_staleness: -1}\n"), "t.yaml");
    ASSERT_EQ(neg.errors.size(), 1u) << Errors(neg);
    EXPECT_EQ(neg.errors[0].key, "rollout.max_staleness");
    EXPECT_NE(neg.errors[0].ToString().find("got -1"), std::string::npos) << Errors(neg);
  }
  // Control PPO's batches in flight are not in a checkpoint: it refuses the pair (LM RL jobs
  // record their groups in flight).
  LoadedJob ckpt = LoadJobText(
      "job: {algorithm: ppo}\nrollout: {max_staleness: 1}\ncheckpoint: {every: 5}\n", "t.yaml");
  ASSERT_EQ(ckpt.errors.size(), 1u) << Errors(ckpt);
  EXPECT_EQ(ckpt.errors[0].key, "checkpoint.every");
  EXPECT_NE(ckpt.errors[0].ToString().find("rollout.max_staleness 1"), std::string::npos)
      << Errors(ckpt);
}

TEST(AlgorithmRegistryTest, PartialRolloutsNeedAsynchronousLanguageModelRl) {
  EXPECT_TRUE(
      LoadJobText("job: {algorithm: grpo}\nrollout: {max_staleness: 1, partial: true}\n", "t.yaml")
          .ok());
  LoadedJob sync = LoadJobText("job: {algorithm: grpo}\nrollout: {partial: true}\n", "t.yaml");
  ASSERT_EQ(sync.errors.size(), 1u) << Errors(sync);
  EXPECT_EQ(sync.errors[0].key, "rollout.partial");
  EXPECT_NE(sync.errors[0].ToString().find("rollout.max_staleness >= 1"), std::string::npos)
      << Errors(sync);
  LoadedJob ppo = LoadJobText("job: {algorithm: ppo}\nrollout: {partial: true}\n", "t.yaml");
  ASSERT_EQ(ppo.errors.size(), 1u) << Errors(ppo);
  EXPECT_EQ(ppo.errors[0].key, "rollout.partial");
  EXPECT_NE(ppo.errors[0].ToString().find("job.algorithm ppo"), std::string::npos) << Errors(ppo);
}

}  // namespace
}  // namespace rlforge
