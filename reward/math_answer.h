// The math reward and the reasoning-format reward.
//
// response -> drop everything up to the last </think> -> FindFinalAnswer
//          -> ParseMathAnswer (math_value.h) -> MathEquivalent with the parsed reference -> 1 | 0
//
// The reference may be a bare answer ("\frac{3}{4}", "1,234") or a GSM8K solution whose final
// line is "#### N". Semantics, forms handled and the agreement with math-verify are in
// docs/math_verifier.md. All functions are pure and thread-safe.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "reward/reward.h"
#include "reward/verifiers.h"

namespace rlforge::reward {

// The final answer of a response as text, or nullopt. kAuto tries, in order: the last
// \boxed{...} (or \fbox), the text after the last "####", the text after the last "answer is" /
// "answer:" (to the end of its sentence), and the last number or LaTeX span in the text.
// The other methods force one of those (kFull: the whole response; kLastNumber: the last number
// or LaTeX span).
std::optional<std::string> FindFinalAnswer(const std::string& response, Extract how);

// The math reward's verdict: does `response` answer `gold`? False when no answer is found.
bool MathVerify(const std::string& gold, const std::string& response, Extract how);

// 1 when MathVerify holds, else 0; an empty reference is an error for that sample.
std::unique_ptr<Reward> MakeMath(Extract extract);

// What must follow the reasoning block of a format reward.
// What follows a format reward's reasoning block (params.answer_form; config/choices.h).
using AnswerForm = ::rlforge::AnswerForm;

// 1 when the response is <tag>reasoning</tag> followed by the answer form (leading and trailing
// whitespace allowed; exactly one opening and one closing tag; non-blank reasoning), else 0.
std::unique_ptr<Reward> MakeThinkFormat(const std::string& tag, AnswerForm answer);

}  // namespace rlforge::reward
