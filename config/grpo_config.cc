#include "config/grpo_config.h"

#include "absl/strings/str_cat.h"

namespace rlforge {

using config::CheckContext;
using config::SchemaBuilder;

void AddGrpoSection(SchemaBuilder<JobConfig>& job) {
  SchemaBuilder<GrpoOptions> b(
      "GRPO for language models: n samples per prompt, group-normalised advantages, PPO clip "
      "(separate low/high bounds), optional KL to the starting policy. Starts from model.path.");
  b.Int("prompts_per_iteration", &GrpoOptions::prompts_per_iteration,
        "Prompts (groups) per iteration.")
      .Min(1)
      .Max(65536);
  b.Int("group_size", &GrpoOptions::group_size, "Samples per prompt (GRPO's n).").Min(2).Max(1024);
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
           "Weight of the KL to the starting (reference) policy in the loss; 0: no reference.")
      .Min(0);
  b.Choice("kl_estimator", &GrpoOptions::kl_estimator, {"k1", "k2", "k3"}, "KL estimator.");
  b.Choice("loss_aggregation", &GrpoOptions::loss_aggregation,
           {"token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"},
           "How per-token losses become one number (seq-mean-token-sum-norm is Dr.GRPO's).");
  b.Bool("scale_by_std", &GrpoOptions::scale_by_std,
         "Divide advantages by the group's reward std (off: Dr.GRPO).");
  b.Bool("filter_degenerate", &GrpoOptions::filter_degenerate,
         "Drop groups whose rewards are all equal before the update (DAPO dynamic sampling).");
  b.Int("epochs", &GrpoOptions::epochs, "Passes over each batch.").Min(1).Max(64);
  b.Int("minibatches", &GrpoOptions::minibatches, "Optimiser steps per pass.").Min(1).Max(4096);
  b.Int("eval_every", &GrpoOptions::eval_every,
        "Iterations between held-out evaluations (also before the first and after the last); "
        "0: only those two.")
      .Min(0);
  b.Int("eval_examples", &GrpoOptions::eval_examples, "Held-out prompts per evaluation.")
      .Min(1);
  b.Int("stream_groups", &GrpoOptions::stream_groups,
        "The rollout worker returns finished groups in chunks of at least this many, so "
        "scoring starts before the slowest sample ends.")
      .Min(1);
  b.Check([](const GrpoOptions& g, CheckContext& ctx) {
    if (g.dual_clip != 0 && g.dual_clip <= 1) {
      ctx.Error("dual_clip", absl::StrCat("must be 0 (off) or greater than 1, got ", g.dual_clip));
    }
    if (g.minibatches > g.prompts_per_iteration) {
      ctx.Error("minibatches", absl::StrCat(g.minibatches, " minibatches of whole groups need at "
                                            "least as many prompts_per_iteration (",
                                            g.prompts_per_iteration, ")"));
    }
  });
  job.Section("grpo", &JobConfig::grpo, b.Build());
}

}  // namespace rlforge
