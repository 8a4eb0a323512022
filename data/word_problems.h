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
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "data/arith_task.h"

namespace rlforge {

struct WordProblem {
  std::string kind;      // the template: shop_total, share, age_future, ...
  std::string question;  // "Tom buys 3 pens for $4 each. How many dollars does he spend?"
  std::string solution;  // "Tom spends 3 * 4 = 12 dollars.\n#### 12"
  int64_t value = 0;     // the number after ####
};

WordProblem MakeWordProblem(uint64_t seed, Split split, uint64_t index);

// Whether a question belongs to the held-out split.
bool IsHeldoutQuestion(const std::string& question);

// The first `count` distinct questions of `split` for `seed` (repeats are skipped).
std::vector<WordProblem> DistinctWordProblems(uint64_t seed, Split split, size_t count);

// One GSM8K JSONL line: {"question": ..., "answer": solution} (no newline).
std::string WordProblemJsonl(const WordProblem& p);

// The committed files: data/word_problems/{train,heldout}.jsonl, written by
// `build/data/make_word_problems data/word_problems` (a test keeps them current).
inline constexpr uint64_t kWordProblemsSeed = 23;
inline constexpr size_t kWordProblemsTrain = 2000;
inline constexpr size_t kWordProblemsHeldout = 200;

// Writes dir/train.jsonl and dir/heldout.jsonl with DistinctWordProblems; errors name the file.
absl::Status WriteWordProblems(const std::string& dir, uint64_t seed, size_t train, size_t heldout);

}  // namespace rlforge
