// ArithmeticTask: multi-digit arithmetic problems with a verifiable answer (a synthetic task
// for SFT, GRPO, PPO and DPO on small language models).
//
// (seed, split, index) -> splitmix64 stream -> operands and operator -> held-out hash test
//   -> PromptExample {prompt "12+345=", answer "357", response "357"}
//
// Every example is a pure function of (seed, split, index): no state, so a job resumes at any
// data position and two processes agree without talking. Train and held-out are disjoint by
// construction: a problem is held out when a fixed hash of its canonical text ("12+345") falls
// below heldout_fraction, independent of the seed, and each split only keeps problems of its
// side. Thread-safe (immutable after Create).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "config/choices.h"
#include "data/prompt_example.h"

namespace rlforge {

struct ArithmeticOptions {
  int64_t min_digits = 1;  // digits per operand, each drawn uniformly in [min, max]
  int64_t max_digits = 3;
  std::vector<std::string> ops = {"+", "-"};  // any of "+", "-", "*"
  bool allow_negative = false;                // false: a - b is drawn with a >= b
  double heldout_fraction = 0.1;  // share of all problems reserved for evaluation, in (0, 1)
  // "plain":    prompt "12+345=",           response "357"
  // "question": prompt "What is 12 + 345?", response "The answer is 357."
  ArithmeticStyle style = ArithmeticStyle::kPlain;
  // Flawed demonstrations: this share of training examples (+ and - only, where it makes a
  // difference) get a response written with every carry and borrow dropped ("78+5=" ->
  // "73"), as from a careless annotator. `answer` stays exact, so rewards and evaluation
  // always score the true value; held-out examples are never flawed. In [0, 1].
  double demo_carry_errors = 0;
};

struct DataOptions;  // config/lm_options.h

enum class Split { kTrain, kHeldout };
const char* SplitName(Split split);

class ArithmeticTask {
 public:
  // Errors name the bad option and value.
  static absl::StatusOr<ArithmeticTask> Create(const ArithmeticOptions& options);

  PromptExample Example(uint64_t seed, Split split, uint64_t index) const;
  // Examples index .. index+n-1.
  std::vector<PromptExample> Examples(uint64_t seed, Split split, uint64_t index, size_t n) const;
  // Whether the canonical problem text ("12+345") belongs to the held-out split.
  bool IsHeldout(const std::string& problem) const;
  // A plausible but wrong answer to `example` (for DPO rejected responses), deterministic in
  // `seed`; never equal to example.answer.
  std::string WrongAnswer(const PromptExample& example, uint64_t seed) const;
  // The SFT response text for an answer in this task's style.
  std::string ResponseFor(const std::string& answer) const;
  // Every character a prompt or response of this task can contain, each once, in a fixed
  // order: the alphabet for MakeCharTokenizer (models/tokenizer.h).
  std::string Alphabet() const;

  const ArithmeticOptions& options() const { return options_; }

  // The value written with every carry (+) or borrow (-) dropped, digit by digit:
  // 78+5 -> 73, 52-7 -> 55. For * (and a - b < 0) the true value.
  static int64_t CarrylessValue(int64_t a, int64_t b, const std::string& op);

 private:
  explicit ArithmeticTask(ArithmeticOptions o) : options_(std::move(o)) {}
  ArithmeticOptions options_;
};

// The task a job's `data:` section describes (data.source arithmetic); errors name the
// bad option.
absl::StatusOr<ArithmeticTask> ArithmeticTaskFor(const DataOptions& data);

}  // namespace rlforge
