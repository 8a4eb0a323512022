#include "controller/task_text.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "data/heldout_set.h"
#include "data/jsonl_dataset.h"

namespace rlforge {

std::vector<int32_t> TaskText::Encode(const std::string& system, const std::string& prompt) const {
  return models::EncodePrompt(*tokenizer, *tmpl, system, prompt);
}

std::vector<int32_t> TaskText::EncodeResponse(const std::string& response) const {
  return models::EncodeResponse(*tokenizer, *tmpl, response);
}

std::string TaskText::Response(const LmSample& s) const {
  return models::DecodeResponse(*tokenizer, *tmpl, s.tokens);
}

std::vector<PromptExample> TaskText::TrainBatch(uint64_t seed, uint64_t offset,
                                                int64_t count) const {
  if (task) return task->Examples(seed, Split::kTrain, offset, static_cast<size_t>(count));
  std::vector<PromptExample> batch;
  for (int64_t k = 0; k < count; ++k) {
    batch.push_back(train_file[(offset + k) % train_file.size()]);
  }
  return batch;
}

absl::StatusOr<TaskText> LoadTaskText(const JobConfig& c, int64_t heldout_examples) {
  TaskText t;
  ASSIGN_OR_RETURN(t.tokenizer, models::LoadTokenizer(c.model.path));
  ASSIGN_OR_RETURN(models::PromptTemplate tmpl,
                   models::PromptTemplate::Create(c.data.prompt_template, t.tokenizer.get()));
  t.tmpl = tmpl;
  const DataOptions& d = c.data;
  if (d.source == DataSource::kJsonl) {
    if (c.job.algorithm->family == AlgorithmFamily::kDpo) {
      ASSIGN_OR_RETURN(t.preference_file, ReadPreferenceJsonl(d.train_path));
      if (t.preference_file.empty()) {
        return absl::InvalidArgumentError(d.train_path + ": no preference pairs");
      }
    } else {
      ASSIGN_OR_RETURN(t.train_file, ReadPromptJsonl(d.train_path, JsonlFormat::kRl));
      if (t.train_file.empty()) return absl::InvalidArgumentError(d.train_path + ": no examples");
    }
  } else {
    ASSIGN_OR_RETURN(ArithmeticTask task, ArithmeticTaskFor(d));
    t.task = task;
  }
  ASSIGN_OR_RETURN(t.heldout, HeldoutExamples(d, static_cast<uint64_t>(c.job.seed),
                                              heldout_examples, JsonlFormat::kRl));
  return t;
}

absl::StatusOr<HeldoutEvaluation> HeldoutEvaluationOf(const JobConfig& c) {
  const AlgorithmSpec& a = *c.job.algorithm;
  HeldoutEvaluation e;
  switch (a.family) {
    case AlgorithmFamily::kLmRl:
      e.examples = c.grpo.eval_examples;
      e.max_new_tokens = c.grpo.max_new_tokens;
      e.verifier = c.grpo.eval_verifier;
      return e;
    case AlgorithmFamily::kDpo:
      e.examples = c.dpo.eval_examples;
      e.max_new_tokens = c.dpo.max_new_tokens;
      return e;
    case AlgorithmFamily::kSft:
      e.examples = c.data.heldout_examples;
      e.max_new_tokens = c.sft.max_new_tokens;
      e.sft = true;
      return e;
    case AlgorithmFamily::kEcho:
    case AlgorithmFamily::kControlPpo:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("job.algorithm ", a.name, " has no held-out evaluation of a language model"));
}

absl::StatusOr<std::vector<PromptExample>> JobHeldoutSet(const JobConfig& c,
                                                         const HeldoutEvaluation& e,
                                                         int64_t count) {
  ASSIGN_OR_RETURN(std::vector<PromptExample> examples,
                   HeldoutExamples(c.data, static_cast<uint64_t>(c.job.seed), count,
                                   e.sft ? JsonlFormat::kSft : JsonlFormat::kRl));
  if (e.sft) {
    for (PromptExample& ex : examples) ex.answer = ex.response;
  }
  return examples;
}

}  // namespace rlforge
