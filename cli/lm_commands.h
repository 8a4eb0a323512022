// `rlforge generate` and `rlforge eval`: the user's view of a checkpoint before and after RL.
//
// generate: prompts (file or stdin) -> CheckpointSampler -> JSONL {prompt, samples: [{text,
//   tokens, finish_reason}]} (a file or stdout)
// eval: JSONL set (data/jsonl_dataset.h, GSM8K lines too) or a job's held-out set (--job: a
//   file or the arithmetic task's split, JobHeldoutSet) -> greedy answers judged by
//   reward::AnswerJudge (what a job's heldout_accuracy is) and, with k > 1, n sampled answers
//   each: pass@1, pass@k (Chen et al.'s unbiased estimator), maj@k -> per-example JSONL, a
//   summary line and one JSON object on stdout
//
// Both take a JobConfig for what a job would say (model.path, data.prompt_template and
// system_prompt, engine:, trainer.threads, data: and job.seed for its held-out set); rlforge-lm
// fills it from flags and --job. A max tokens not given on the command line that would not fit
// the model's context is clipped to what fits, with a note on stderr (FitMaxTokens).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "config/answer_check.h"
#include "config/job_config.h"
#include "controller/lm_loop.h"

namespace rlforge {

struct GenerateOptions {
  std::string prompts = "-";      // a file, or "-" for stdin
  SamplingParams sampling;        // max_tokens: clipped to the model's context unless given
  bool max_tokens_given = false;  // --max-tokens was on the command line
  std::string out;                // "" = stdout
};

struct EvalOptions {
  std::string data;                      // JSONL held-out set; "" = the job's (`job`)
  std::optional<HeldoutEvaluation> job;  // --job: its held-out evaluation
  AnswerCheck check = AnswerCheck::kExact;
  int64_t max_tokens = 8;  // clipped to the model's context unless given
  bool max_tokens_given = false;
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
// `rlforge merge-lora`: the adapter merged into its base (base_dir, or the adapter config's
// base_model_name_or_path), written to out_dir as an ordinary HF checkpoint with the base's
// tokenizer. Exit status 0, 2 for bad input, 1 otherwise.
int RunMergeLora(const std::string& adapter_dir, const std::string& base_dir,
                 const std::string& out_dir);

}  // namespace rlforge
