#include "reward/answer_check.h"

#include <cmath>

#include "common/check.h"
#include "reward/math_answer.h"
#include "reward/verifiers.h"

namespace rlforge::reward {

namespace {

std::shared_ptr<const Reward> RewardFor(AnswerCheck check) {
  switch (check) {
    case AnswerCheck::kExact:
      return MakeExactAnswer(Extract::kFull, /*case_sensitive=*/false);
    case AnswerCheck::kNumeric:
      return MakeNumeric(Extract::kAuto, /*abs_tol=*/1e-6, /*rel_tol=*/0);
    case AnswerCheck::kMath:
      return MakeMath(Extract::kAuto);
  }
  return nullptr;
}

}  // namespace

AnswerJudge::AnswerJudge(AnswerCheck check) : check_(check), reward_(RewardFor(check)) {}

bool AnswerJudge::Correct(const std::string& response, const std::string& reference) const {
  Sample s;
  s.response = response;
  s.answer = reference;
  const SampleScore score = reward_->ScoreOne(s);
  return score.ok() && score.value > 0.5;
}

std::optional<std::string> AnswerJudge::FinalAnswer(const std::string& response) const {
  switch (check_) {
    case AnswerCheck::kExact: {
      auto got = ExtractAnswer(response, Extract::kFull, /*numeric=*/false);
      if (!got) return std::nullopt;
      return NormalizeAnswer(*got, /*case_sensitive=*/false);
    }
    case AnswerCheck::kNumeric:
      return ExtractAnswer(response, Extract::kAuto, /*numeric=*/true);
    case AnswerCheck::kMath:
      return FindFinalAnswer(response, Extract::kAuto);
  }
  return std::nullopt;
}

bool AnswerJudge::SameAnswer(const std::string& a, const std::string& b) const {
  // Both are final answers already: compare them whole, not what extraction finds in them.
  switch (check_) {
    case AnswerCheck::kExact:
      return NormalizeAnswer(a, false) == NormalizeAnswer(b, false);
    case AnswerCheck::kNumeric: {
      auto x = ParseNumber(NormalizeAnswer(a, true)), y = ParseNumber(NormalizeAnswer(b, true));
      return x && y && std::fabs(*x - *y) <= 1e-6;
    }
    case AnswerCheck::kMath:
      return MathVerify(a, b, Extract::kFull);
  }
  return false;
}

MajorityVote Majority(const AnswerJudge& judge,
                      const std::vector<std::optional<std::string>>& answers) {
  std::vector<std::pair<std::string, int64_t>> classes;  // representative, votes
  for (const auto& a : answers) {
    if (!a) continue;
    bool placed = false;
    for (auto& [rep, votes] : classes) {
      if (judge.SameAnswer(rep, *a)) {
        ++votes;
        placed = true;
        break;
      }
    }
    if (!placed) classes.push_back({*a, 1});
  }
  MajorityVote best;
  for (const auto& [rep, votes] : classes) {
    if (votes > best.votes) best = {rep, votes};
  }
  return best;
}

double PassAtK(int64_t n, int64_t c, int64_t k) {
  RF_CHECK(c >= 0 && c <= n && k >= 1 && k <= n);
  if (n - c < k) return 1.0;
  // C(n-c, k) / C(n, k) = prod_{i = n-c+1}^{n} (1 - k / i), stable for large n.
  double none = 1.0;
  for (int64_t i = n - c + 1; i <= n; ++i) {
    none *= 1.0 - static_cast<double>(k) / static_cast<double>(i);
  }
  return 1.0 - none;
}

}  // namespace rlforge::reward
