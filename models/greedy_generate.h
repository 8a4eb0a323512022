// Greedy decoding with a contiguous KV cache, batched: for evaluation and tests (the
// rollout engine has the paged, continuously batched one).
//
// prompts -> left-padded [B, T] -> prefill through HiddenIncremental -> argmax token per
// row -> decode steps of B tokens until every row hit a stop token or the budget
//
// The cache is one [B, T_max, kv_heads, head_dim] tensor per layer; left padding puts
// every row's next token in the same column, so one step appends one column.
#pragma once

#include <cstdint>
#include <vector>

#include "models/transformer.h"

namespace rlforge::models {

struct GreedyOptions {
  int64_t max_new_tokens = 16;
  std::vector<int32_t> stop_tokens;  // generation of a row ends after one of these
};

// Per prompt, the generated tokens (a stop token, when hit, is included last).
// Prompts must be non-empty. Runs under NoGradGuard.
std::vector<std::vector<int32_t>> GreedyGenerate(Transformer& model,
                                                 const std::vector<std::vector<int32_t>>& prompts,
                                                 const GreedyOptions& options);

}  // namespace rlforge::models
