// Grade-school word problems in GSM8K's format: a small, learnable stand-in for GSM8K.
//
// (seed, split, index) -> splitmix64 stream -> template (shopping, sharing, ages, rates, ...)
//   and small numbers -> held-out hash of the question -> WordProblem {question, solution, value}
//
// Each problem takes one or two operations; its solution is GSM8K's worked answer: one line
// per step, each "... A op B = C ...", then "#### N". Every problem is a pure function of
// (seed, split, index). Train and held-out are disjoint by construction: a question is held out
// when a fixed hash of its text falls in the lowest tenth, whatever the seed, and each split
// keeps only questions of its side. WriteWordProblems writes the committed files
// data/word_problems/{train,heldout}.jsonl ({"question", "answer"} lines, read by
// data.source: jsonl). Thread-safe (no state).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "data/arith_task.h"

namespace rlforge {

// One line of a worked solution: "<before>A op B = C<after>"; an operand taken from an earlier
// step's result names that step (a_from / b_from >= 0; a / b are then unused).
struct WorkedStep {
  std::string before;
  int64_t a = 0;
  char op = '+';  // + - * /
  int64_t b = 0;
  std::string after;
  int a_from = -1, b_from = -1;
};

struct WordProblem {
  std::string kind;               // the template: shop_total, share, age_future, ...
  std::string question;           // "Tom buys 3 pens for $4 each. How many dollars does he spend?"
  std::vector<WorkedStep> steps;  // what `solution` works out
  std::string solution;           // "Tom spends 3 * 4 = 12 dollars.\n#### 12"
  int64_t value = 0;              // the number after ####
};

// A careless annotator's slips, as in the SFT demonstrations of train_careless.jsonl:
// kDroppedCarry writes the first + or - step whose carry or borrow matters with it dropped
// (ArithmeticTask::CarrylessValue: "15 - 6 = 19", "17 + 5 = 12"), the later steps worked from
// that result; kStoppedEarly stops after the first step and answers its result (the
// intermediate quantity: the cost instead of the change).
enum class Slip { kNone, kDroppedCarry, kStoppedEarly };

// `p` with its solution and value as `slip` writes them; nullopt when the slip has nowhere to
// happen (no carry or borrow that matters, a division it would leave inexact, one step only) or
// leaves the final answer right.
std::optional<WordProblem> SlipWordProblem(const WordProblem& p, Slip slip);

// The SFT demonstration of `p`: for a share `careless_share` of questions (a fixed hash of the
// question decides which) the worked answer with a dropped carry, or where none applies stopped
// early, or `p` itself where neither applies; otherwise `p`.
WordProblem Demonstration(const WordProblem& p, double careless_share);

WordProblem MakeWordProblem(uint64_t seed, Split split, uint64_t index);

// Whether a question belongs to the held-out split.
bool IsHeldoutQuestion(const std::string& question);

// The first `count` distinct questions of `split` for `seed` (repeats are skipped).
std::vector<WordProblem> DistinctWordProblems(uint64_t seed, Split split, size_t count);

// One GSM8K JSONL line: {"question": ..., "answer": solution} (no newline).
std::string WordProblemJsonl(const WordProblem& p);

// The committed files: data/word_problems/{train,heldout,train_careless}.jsonl, written by
// `build/data/make_word_problems data/word_problems` (a test keeps them current).
inline constexpr uint64_t kWordProblemsSeed = 23;
inline constexpr size_t kWordProblemsTrain = 2000;
inline constexpr size_t kWordProblemsHeldout = 200;
inline constexpr double kWordProblemsCarelessShare = 0.6;

// Writes dir/train.jsonl and dir/heldout.jsonl with DistinctWordProblems, and
// dir/train_careless.jsonl: train's questions, each answered by Demonstration(p,
// careless_share). Errors name the file.
absl::Status WriteWordProblems(const std::string& dir, uint64_t seed, size_t train, size_t heldout,
                               double careless_share);

}  // namespace rlforge
