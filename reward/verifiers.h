// Built-in verifiers for tasks with a known answer.
//
// response -> extract the answer ("\boxed{X}", "answer is X", last number, whole text)
//          -> normalise (whitespace, case, trailing punctuation) -> compare with the reference
//
// All are stateless and thread-safe.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "config/choices.h"
#include "config/reward_options.h"
#include "reward/reward.h"

namespace rlforge::reward {

// How the answer is found in a response (reward.rewards[].params.extract; config/choices.h).
using Extract = AnswerExtract;

// The answer found in `response`, or nullopt when the method finds none.
std::optional<std::string> ExtractAnswer(const std::string& response, Extract how, bool numeric);
// Trims and collapses whitespace runs, strips trailing . , ; : ! and surrounding $ or quotes,
// lower-cases ASCII unless case_sensitive.
std::string NormalizeAnswer(const std::string& text, bool case_sensitive);
// Parses "1,234.5", "-3", "1e3", "50%" (as 50); nullopt when not a number.
std::optional<double> ParseNumber(const std::string& text);

// 1 when the extracted, normalised answer equals the normalised reference, else 0.
std::unique_ptr<Reward> MakeExactAnswer(Extract extract, bool case_sensitive);
// 1 when |x - ref| <= abs_tol + rel_tol * |ref|, else 0 (also 0 when no number is found).
// A reference that is not a number is an error for that sample.
std::unique_ptr<Reward> MakeNumeric(Extract extract, double abs_tol, double rel_tol);
// 1 when the response contains (or, with full_match, is) a match of `pattern`, else 0. The
// matcher itself gives up after time_limit_s (an error for that sample), so a pathological
// pattern does not keep a thread spinning after RewardSet's timeout.
absl::StatusOr<std::unique_ptr<Reward>> MakeRegexFormat(const std::string& pattern, bool full_match,
                                                        double time_limit_s = 10);
// DAPO's soft overlong punishment: 0 up to max_length - buffer, then linear down to -1 at
// max_length, -1 beyond. Length in tokens when the sample has them and unit is tokens.
std::unique_ptr<Reward> MakeLengthPenalty(int64_t max_length, int64_t buffer, bool tokens);

}  // namespace rlforge::reward
