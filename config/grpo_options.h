// The `grpo:` section: group-relative policy optimisation for language models.
#pragma once

#include <cstdint>
#include <string>

namespace rlforge {

struct GrpoOptions {
  int64_t prompts_per_iteration = 16;
  int64_t group_size = 8;
  double temperature = 1.0;
  double top_p = 1.0;
  int64_t top_k = 0;
  int64_t max_new_tokens = 8;
  double clip_low = 0.2;
  double clip_high = 0.28;
  double dual_clip = 0;
  double kl_beta = 0.0;
  std::string kl_estimator = "k3";
  std::string loss_aggregation = "token-mean";
  bool scale_by_std = true;
  bool filter_degenerate = false;
  int64_t epochs = 1;
  int64_t minibatches = 1;
  int64_t eval_every = 5;
  int64_t eval_examples = 200;
  int64_t stream_groups = 4;
};

}  // namespace rlforge
