// `rlforge generate` and `rlforge eval`: the user's view of a checkpoint before and after RL.
//
// generate: prompts (file or stdin) -> CheckpointSampler -> JSONL {prompt, samples: [{text,
//   tokens, finish_reason}]} (a file or stdout)
// eval: JSONL set (data/jsonl_dataset.h, GSM8K lines too) -> greedy answers judged by
//   reward::AnswerJudge (what a job's heldout_accuracy is) and, with k > 1, n sampled answers
//   each: pass@1, pass@k (Chen et al.'s unbiased estimator), maj@k -> per-example JSONL, a
//   summary line and one JSON object on stdout
//
// Both take a JobConfig for what a job would say (model.path, data.prompt_template and
// system_prompt, engine:, trainer.threads); rlforge-lm fills it from flags and --job.
#pragma once

#include <cstdint>
#include <string>

#include "config/answer_check.h"
#include "config/job_config.h"
#include "controller/lm_loop.h"

namespace rlforge {

struct GenerateOptions {
  std::string prompts = "-";  // a file, or "-" for stdin
  SamplingParams sampling;
  std::string out;  // "" = stdout
};

struct EvalOptions {
  std::string data;  // JSONL held-out set
  AnswerCheck check = AnswerCheck::kExact;
  int64_t max_tokens = 8;
  int64_t limit = 0;         // 0 = every example
  int64_t k = 1;             // > 1: a sampled pass with n samples per example
  int64_t n = 0;             // 0 = k
  double temperature = 1.0;  // the sampled pass's
  uint64_t seed = 0;
  std::string out;  // per-example JSONL; "" = none
};

// Exit codes: 0 done, 1 it failed while running, 2 bad input (the message names the flag,
// file or line).
int RunGenerate(const JobConfig& config, const GenerateOptions& o);
int RunEval(const JobConfig& config, const EvalOptions& o);

}  // namespace rlforge
