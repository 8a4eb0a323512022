// AnswerJudge: the held-out verdict of language-model jobs (heldout_accuracy) and of
// `rlforge eval`, one implementation for both so their accuracies agree.
//
// response, reference -> the reward of config/answer_check.h's kind (exact_answer with
//   extract full, numeric with extract auto and abs_tol 1e-6, math with extract auto)
//   -> correct | not
//
// Also what sampled evaluation needs: each response's final answer, majority votes over
// answers (two answers are one when the same verifier calls them equivalent) and the unbiased
// pass@k estimator. Immutable after construction; every method is thread-safe.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/answer_check.h"
#include "reward/reward.h"

namespace rlforge::reward {

class AnswerJudge {
 public:
  explicit AnswerJudge(AnswerCheck check);

  // Whether `response` answers `reference`. A reference the verifier cannot read (an empty
  // one for math, a non-number for numeric) makes every response wrong.
  bool Correct(const std::string& response, const std::string& reference) const;
  // The answer the verifier reads off `response` (normalised for exact), or nullopt.
  std::optional<std::string> FinalAnswer(const std::string& response) const;
  // Whether two final answers (FinalAnswer's, or a bare reference) are equivalent for this
  // verifier: `a` is read as a reference is.
  bool SameAnswer(const std::string& a, const std::string& b) const;
  AnswerCheck check() const { return check_; }

 private:
  AnswerCheck check_;
  std::shared_ptr<const Reward> reward_;
};

struct MajorityVote {
  std::optional<std::string> answer;  // the most voted answer (first seen wins ties); none if
                                      // no response had one
  int64_t votes = 0;
};
// The majority over `answers` (nullopt entries do not vote), grouping equivalent answers.
MajorityVote Majority(const AnswerJudge& judge,
                      const std::vector<std::optional<std::string>>& answers);

// Chen et al. (2021)'s unbiased pass@k from n samples of which c are correct:
// 1 - C(n - c, k) / C(n, k). Requires 0 <= c <= n and 1 <= k <= n.
double PassAtK(int64_t n, int64_t c, int64_t k);

}  // namespace rlforge::reward
