#include "config/grpo_config.h"

#include "absl/strings/str_cat.h"
#include "config/policy_loss_registry.h"

namespace rlforge {

using config::CheckContext;
using config::SchemaBuilder;

namespace {

// "auto: ..." listing each policy loss's and each algorithm's default, from the registry.
std::string AutoAggregationDoc() {
  std::string doc = "auto: the policy loss's default (";
  bool first = true;
  for (const PolicyLossSpec& l : PolicyLosses()) {
    if (!l.default_loss_aggregation.has_value()) continue;
    absl::StrAppend(&doc, first ? "" : ", ", l.name, ": ", ChoiceName(*l.default_loss_aggregation));
    first = false;
  }
  absl::StrAppend(&doc, "), else the algorithm's (");
  first = true;
  for (const AlgorithmSpec& a : Algorithms()) {
    if (!a.default_policy_loss.has_value()) continue;  // not a kLmRl algorithm
    absl::StrAppend(&doc, first ? "" : ", ", a.name, ": ", ChoiceName(a.default_loss_aggregation));
    first = false;
  }
  return doc + "), written into the resolved config.";
}

// lm_rl.policy_loss's documentation: each loss's summary and each algorithm's default.
std::string PolicyLossDoc() {
  std::string doc =
      "The policy loss the trainer minimises (trainer/policy_loss.h, docs/lm_losses.md).";
  for (const PolicyLossSpec& l : PolicyLosses())
    absl::StrAppend(&doc, " ", l.name, ": ", l.summary, ".");
  absl::StrAppend(&doc, " auto: the algorithm's default (");
  bool first = true;
  for (const AlgorithmSpec& a : Algorithms()) {
    if (!a.default_policy_loss.has_value()) continue;
    absl::StrAppend(&doc, first ? "" : ", ", a.name, ": ",
                    PolicyLossOf(*a.default_policy_loss).name);
    first = false;
  }
  return doc + "), written into the resolved config.";
}

bool ParsePolicyLoss(const YAML::Node& n, std::optional<PolicyLossKind>* out, std::string* why) {
  std::vector<std::string> choices = {"auto"};
  for (const std::string& name : PolicyLossNames()) choices.push_back(name);
  std::string name;
  if (!config::MakeChoiceParser(choices)(n, &name, why)) return false;
  if (name == "auto") {
    out->reset();
  } else {
    *out = FindPolicyLoss(name)->kind;
  }
  return true;
}

std::string PolicyLossType() {
  std::vector<std::string> choices = {"auto"};
  for (const std::string& name : PolicyLossNames()) choices.push_back(name);
  return config::ChoiceType(choices);
}

bool ParseLossAggregation(const YAML::Node& n, std::optional<LossAggregation>* out,
                          std::string* why) {
  std::vector<std::string> choices = {"auto"};
  for (const std::string& word : ChoiceWordList<LossAggregation>()) choices.push_back(word);
  std::string word;
  if (!config::MakeChoiceParser(choices)(n, &word, why)) return false;
  if (word == "auto") {
    out->reset();
  } else {
    *out = *ParseChoice<LossAggregation>(word);
  }
  return true;
}

bool ParseEvalVerifier(const YAML::Node& n, AnswerCheck* out, std::string* why) {
  std::string name;
  if (!config::MakeChoiceParser(AnswerCheckNames())(n, &name, why)) return false;
  *out = *ParseAnswerCheck(name);
  return true;
}

}  // namespace

void AddGrpoSection(SchemaBuilder<JobConfig>& job) {
  SchemaBuilder<GrpoOptions> b(
      "Policy-gradient RL of a language model (the algorithms that read this section, see "
      "job.algorithm): n samples per prompt, PPO clip (separate low/high bounds), optional KL "
      "to the starting policy, held-out evaluation. The algorithm picks how rewards become "
      "advantages (lm_ppo: a critic, `critic:`). Starts from model.path.");
  b.Int("prompts_per_iteration", &GrpoOptions::prompts_per_iteration,
        "Prompts (groups) per iteration.")
      .Min(1)
      .Max(65536);
  b.Int("group_size", &GrpoOptions::group_size,
        "Samples per prompt (GRPO's n; at least 2 where the advantage compares the samples of "
        "a group, any for lm_ppo).")
      .Min(1)
      .Max(1024);
  b.Double("temperature", &GrpoOptions::temperature, "Sampling temperature for training rollouts.")
      .Min(0, false);
  b.Double("top_p", &GrpoOptions::top_p, "Nucleus sampling mass; 1 is off.").Min(0, false).Max(1);
  b.Int("top_k", &GrpoOptions::top_k, "Top-k sampling; 0 is off.").Min(0);
  b.Int("max_new_tokens", &GrpoOptions::max_new_tokens, "Generation budget per sample.").Min(1);
  b.Double("clip_low", &GrpoOptions::clip_low, "Ratio clip below: 1 - clip_low.").Min(0).Max(1);
  b.Double("clip_high", &GrpoOptions::clip_high,
           "Ratio clip above: 1 + clip_high (DAPO's clip-higher when > clip_low).")
      .Min(0);
  b.Double("dual_clip", &GrpoOptions::dual_clip,
           "Dual-clip bound c for negative advantages (> 1); 0 is off.")
      .Min(0);
  b.Double("kl_beta", &GrpoOptions::kl_beta,
           "Weight of the KL to the starting (reference) policy: a loss term for grpo, a "
           "per-token reward penalty for lm_ppo; 0: no reference.")
      .Min(0);
  b.Enum("kl_estimator", &GrpoOptions::kl_estimator, "KL estimator.");
  b.Enum("off_policy", &GrpoOptions::off_policy,
         "Per-token correction of tokens sampled by another policy than the trainer's (a "
         "lagging engine under rollout.max_staleness, or the engine's numerics), with w = "
         "pi_prox / pi_rollout and pi_prox the trainer's logprob before the step's first "
         "update, around which the ratio is then clipped. none: clip around the rollout's "
         "logprobs. decoupled: AReaL's decoupled PPO, loss x w, tokens with w > is_cap "
         "dropped. tis: loss x min(w, is_cap). mask: tokens with w outside [1/is_cap, "
         "is_cap] dropped (docs/async_rl.md).");
  b.Double("is_cap", &GrpoOptions::is_cap,
           "The cap C of lm_rl.off_policy's importance weights (> 1).")
      .Min(1, false);
  b.Typed<std::optional<PolicyLossKind>>(
      "policy_loss", &GrpoOptions::policy_loss, PolicyLossDoc(), PolicyLossType(), ParsePolicyLoss,
      [](const std::optional<PolicyLossKind>& v) {
        return YAML::Node(v.has_value() ? PolicyLossOf(*v).name : std::string("auto"));
      });
  {
    std::vector<std::string> words = {"auto"};
    for (const std::string& w : ChoiceWordList<LossAggregation>()) words.push_back(w);
    b.Typed<std::optional<LossAggregation>>(
        "loss_aggregation", &GrpoOptions::loss_aggregation,
        "How per-token losses become one number (seq-mean-token-sum-norm is Dr.GRPO's). " +
            AutoAggregationDoc(),
        config::ChoiceType(words), ParseLossAggregation,
        [](const std::optional<LossAggregation>& v) {
          return YAML::Node(v.has_value() ? std::string(ChoiceName(*v)) : std::string("auto"));
        });
  }
  b.Bool("filter_degenerate", &GrpoOptions::filter_degenerate,
         "Drop groups whose rewards are all equal before the update (DAPO dynamic sampling).");
  b.Bool("skip_zero_advantage", &GrpoOptions::skip_zero_advantage,
         "Leave groups whose advantages are all exactly 0 out of the trainer's forward and "
         "backward when the loss has no KL term (lm_rl.kl_beta 0): their loss terms and "
         "gradients are exactly 0 and they still count in the loss's denominator, so the "
         "update is the same; per-token metrics (entropy, clipfrac, approx_kl, logprob "
         "mismatch) then cover the computed groups. false: every group runs (docs/lm_rl.md).");
  b.Int("epochs", &GrpoOptions::epochs, "Passes over each batch.").Min(1).Max(64);
  b.Int("minibatches", &GrpoOptions::minibatches, "Optimiser steps per pass.").Min(1).Max(4096);
  b.Int("eval_every", &GrpoOptions::eval_every,
        "Iterations between held-out evaluations (also before the first and after the last); "
        "0: only those two.")
      .Min(0);
  b.Int("eval_examples", &GrpoOptions::eval_examples, "Held-out prompts per evaluation.").Min(1);
  b.Typed<AnswerCheck>(
      "eval_verifier", &GrpoOptions::eval_verifier,
      "How a greedy held-out answer is judged (heldout_accuracy): exact (the whole response "
      "equals the reference, normalised), numeric (its final number equals the reference's) or "
      "math (the `math` reward's verifier: final answers equivalent, e.g. GSM8K's \"#### 72\"). "
      "`rlforge eval --reward` judges the same way (docs/generate_eval.md).",
      config::ChoiceType(AnswerCheckNames()), ParseEvalVerifier,
      [](const AnswerCheck& v) { return YAML::Node(AnswerCheckName(v)); });
  b.Int("stream_groups", &GrpoOptions::stream_groups,
        "The rollout worker returns finished groups in chunks of at least this many, so "
        "scoring starts before the slowest sample ends.")
      .Min(1);
  b.Check([](const GrpoOptions& g, CheckContext& ctx) {
    if (g.off_policy == OffPolicyCorrection::kNone && g.is_cap != GrpoOptions().is_cap) {
      ctx.Error("is_cap", "only used with off_policy decoupled, tis or mask (off_policy is none)");
    }
    if (g.dual_clip != 0 && g.dual_clip <= 1) {
      ctx.Error("dual_clip", absl::StrCat("must be 0 (off) or greater than 1, got ", g.dual_clip));
    }
    if (g.minibatches > g.prompts_per_iteration) {
      ctx.Error("minibatches", absl::StrCat(g.minibatches,
                                            " minibatches of whole groups need at "
                                            "least as many prompts_per_iteration (",
                                            g.prompts_per_iteration, ")"));
    }
  });
  job.Section("lm_rl", &JobConfig::grpo, b.Build());
  job.Renamed("grpo", "lm_rl");  // its name until it served drgrpo, rloo and lm_ppo too
  job.Check([](const JobConfig& c, CheckContext& ctx) {
    if (c.job.algorithm == nullptr || !c.job.algorithm->default_policy_loss.has_value()) return;
    const PolicyLossKind loss = c.grpo.policy_loss.value_or(*c.job.algorithm->default_policy_loss);
    const PolicyLossSpec& spec = PolicyLossOf(loss);
    if (c.grpo.clip_low >= 1 && !spec.clip_low_one_unbounded) {
      ctx.Error("lm_rl.clip_low", absl::StrCat("policy_loss ", spec.name,
                                               " needs clip_low < 1 (its ratio's lower bound is "
                                               "1 - clip_low), got ",
                                               c.grpo.clip_low));
    }
    // The token-level clipped loss alone has these; the others would ignore them.
    if (loss == PolicyLossKind::kPpoClip) return;
    const std::string& name = spec.name;
    if (c.grpo.off_policy != OffPolicyCorrection::kNone) {
      ctx.Error("lm_rl.off_policy", absl::StrCat(ChoiceName(c.grpo.off_policy),
                                                 " corrects the token-level clipped loss "
                                                 "(policy_loss ppo_clip); policy_loss ",
                                                 name, " has no off-policy correction (set none)"));
    }
    if (c.grpo.dual_clip != 0) {
      ctx.Error("lm_rl.dual_clip", absl::StrCat("bounds the token-level clipped loss (policy_loss "
                                                "ppo_clip); policy_loss ",
                                                name, " has none (set 0)"));
    }
  });
  job.Check([](const JobConfig& c, CheckContext& ctx) {
    if (c.job.algorithm != nullptr && c.job.algorithm->uses_groups && c.grpo.group_size < 2) {
      ctx.Error("lm_rl.group_size",
                absl::StrCat(c.job.algorithm->name,
                             "'s advantage compares the samples of a "
                             "group, which needs at least 2 samples per prompt, got ",
                             c.grpo.group_size));
    }
  });

  SchemaBuilder<CriticOptions> cb(
      "The value model of `job.algorithm: lm_ppo`: a copy of model.path with a fresh value "
      "head and its own AdamW (trainer section's betas, weight decay and grad clip, constant "
      "critic.lr); token-level "
      "GAE over each response, clipped value loss.");
  cb.Double("lr", &CriticOptions::lr, "Critic learning rate.").Min(0, false);
  cb.Double("value_clip", &CriticOptions::value_clip,
            "Clip of the value change per update (PPO's value clipping); 0 is off.")
      .Min(0);
  cb.Double("gamma", &CriticOptions::gamma, "Discount per token.").Min(0).Max(1);
  cb.Double("lambda", &CriticOptions::lambda, "GAE lambda.").Min(0).Max(1);
  cb.Bool("whiten_advantages", &CriticOptions::whiten_advantages,
          "Normalise advantages over the batch's response tokens.");
  cb.Int("warmup_iterations", &CriticOptions::warmup_iterations,
         "First iterations that train only the critic (the policy stays at version 0's "
         "weights), so early advantages come from a value model that has seen rewards.")
      .Min(0);
  job.Section("critic", &JobConfig::critic, cb.Build());

  SchemaBuilder<DpoJobOptions> db(
      "Direct preference optimisation (`job.algorithm: dpo`): each iteration takes "
      "(chosen, rejected) answer pairs (built fresh from the arithmetic task, or the next "
      "lines of data.train_path: {\"prompt\", \"chosen\", \"rejected\"}), the frozen "
      "starting policy scores them once, the policy minimises the DPO loss; held-out accuracy "
      "by greedy generation.");
  db.Int("pairs_per_iteration", &DpoJobOptions::pairs_per_iteration,
         "Preference pairs per optimiser step.")
      .Min(1)
      .Max(65536);
  db.Double("beta", &DpoJobOptions::beta, "DPO's beta (strength of the reference anchor).")
      .Min(0, false);
  db.Enum("loss_type", &DpoJobOptions::loss_type, "sigmoid: Rafailov et al.; ipo: Azar et al.");
  db.Double("label_smoothing", &DpoJobOptions::label_smoothing,
            "Conservative DPO's label smoothing (sigmoid only).")
      .Min(0)
      .Max(0.5, false);
  db.Enum("rejected", &DpoJobOptions::rejected,
          "Arithmetic task: the rejected answer is carryless (the answer with every carry and "
          "borrow dropped, where that differs; else random) or random (a nearby wrong "
          "number). JSONL pairs bring their own.");
  db.Int("epochs", &DpoJobOptions::epochs, "Optimiser steps on each iteration's pairs.")
      .Min(1)
      .Max(64);
  db.Int("eval_every", &DpoJobOptions::eval_every,
         "Iterations between held-out evaluations (also before the first and after the "
         "last); 0: only those two.")
      .Min(0);
  db.Int("eval_examples", &DpoJobOptions::eval_examples, "Held-out prompts per evaluation.").Min(1);
  db.Int("max_new_tokens", &DpoJobOptions::max_new_tokens,
         "Greedy generation budget per held-out answer.")
      .Min(1);
  job.Section("dpo", &JobConfig::dpo, db.Build());
  job.Check([](const JobConfig& c, CheckContext& ctx) {
    if (c.job.algorithm != nullptr && c.job.algorithm->Reads("dpo") &&
        c.dpo.loss_type == DpoLossType::kIpo && c.dpo.label_smoothing > 0) {
      ctx.Error("dpo.label_smoothing", "applies to loss_type sigmoid only");
    }
  });
}

}  // namespace rlforge
