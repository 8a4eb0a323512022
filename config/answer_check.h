// How a held-out response is judged against its reference answer. Parsed once here (from
// lm_rl.eval_verifier in a job, `rlforge eval --reward` on the command line); the verdicts
// themselves are reward/answer_check.h's.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rlforge {

enum class AnswerCheck {
  kExact,    // the whole response, normalised, equals the normalised reference
  kNumeric,  // the response's final number equals the reference's (|x - y| <= 1e-6)
  kMath,     // the math verifier (reward kind `math`): final answers equivalent
};

// "exact", "numeric", "math": in enum order.
const std::vector<std::string>& AnswerCheckNames();
std::optional<AnswerCheck> ParseAnswerCheck(std::string_view name);
const std::string& AnswerCheckName(AnswerCheck check);

}  // namespace rlforge
