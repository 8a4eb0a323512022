// What a language-model job's controller needs to turn examples into prompts and responses
// into text: the tokenizer, the prompt template and the data (training and held-out).
//
// data.* -> LoadTaskText -> TaskText {tokenizer, template, task or files} -> Encode (prompt
//   token ids for the engines) / Response (sample tokens back to text)
//
// Immutable once loaded; the controller does not load libtorch.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "config/answer_check.h"
#include "config/job_config.h"
#include "data/arith_task.h"
#include "models/chat_template.h"
#include "models/tokenizer.h"
#include "proto/lm_groups.h"

namespace rlforge {

// Everything the controller needs to turn examples into prompts and responses into text.
struct TaskText {
  std::unique_ptr<models::Tokenizer> tokenizer;
  std::optional<models::PromptTemplate> tmpl;
  std::optional<ArithmeticTask> task;  // data.source arithmetic
  std::vector<PromptExample> train_file, heldout;
  std::vector<PreferenceExample> preference_file;  // dpo with data.source jsonl

  // bos (when the tokenizer has one) + the templated prompt: what the rollout engine sees.
  std::vector<int32_t> Encode(const std::string& system, const std::string& prompt) const;
  // Response text + end of turn + eos: the tokens a policy emits for `response` (as SFT
  // trains them), e.g. one side of a DPO pair.
  std::vector<int32_t> EncodeResponse(const std::string& response) const;
  // Response text without the stop token and end-of-turn marker.
  std::string Response(const LmSample& s) const;
  // `count` training examples starting at `offset`: the arithmetic task's stream, or the
  // training file cycled.
  std::vector<PromptExample> TrainBatch(uint64_t seed, uint64_t offset, int64_t count) const;
};

// Loads model.path's tokenizer, data.prompt_template and the data; keeps at most
// `heldout_examples` held-out examples. For dpo, a JSONL train file holds preference pairs
// ({"prompt", "chosen", "rejected"}).
absl::StatusOr<TaskText> LoadTaskText(const JobConfig& c, int64_t heldout_examples);

// A job's held-out evaluation as its config describes it, for `rlforge eval --job`. kLmRl:
// grpo.eval_examples, max_new_tokens and eval_verifier (what LmRlAlgorithm passes to
// LmLoop::Evaluate); kDpo: dpo.eval_examples and max_new_tokens, exact; kSft:
// data.heldout_examples and sft.max_new_tokens, exact, against each example's SFT response
// (what the SFT trainer compares with). An error for a job without one (echo, ppo).
struct HeldoutEvaluation {
  int64_t examples = 0;  // how many of the held-out set
  int64_t max_new_tokens = 0;
  AnswerCheck verifier = AnswerCheck::kExact;
  bool sft = false;  // the reference is the SFT response (held-out lines {prompt, response})
};
absl::StatusOr<HeldoutEvaluation> HeldoutEvaluationOf(const JobConfig& c);

// The first `count` examples of the job's held-out set, as the job reads it (HeldoutExamples,
// data/heldout_set.h, for job.seed), each one's reference in `answer`. Errors name the file
// and line, or the data.* option.
absl::StatusOr<std::vector<PromptExample>> JobHeldoutSet(const JobConfig& c,
                                                         const HeldoutEvaluation& e, int64_t count);

}  // namespace rlforge
