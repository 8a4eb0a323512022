// The value of a final math answer, and when two answers are the same.
//
// answer text -> Normalize (LaTeX spacing, \left/\right, \dfrac, \text{}, $, ^\circ, \%)
//             -> parse an expression (+ - * / ^, \frac, \sqrt, parentheses, %, 1,234)
//             -> trailing unit words dropped ("12 cm") -> MathAnswer {number | text}
//
// Numbers are exact rationals (128-bit numerator and denominator) while the arithmetic allows:
// 0.50 = .5 = 1/2 = \frac{2}{4} exactly, with no float epsilon. An irrational value (\sqrt{2},
// \pi) or an overflow keeps only a double. The comparison rules follow math-verify
// (docs/math_verifier.md): when either side was written with a decimal point both are rounded
// to 6 decimal places ("0.333333" = 1/3); "X%" equals X/100, and also X when both X and the
// other side are integers. Answers that are not numbers compare as canonical text.
// All functions are pure and thread-safe.
#pragma once

#include <optional>
#include <string>

namespace rlforge::reward {

// A reduced fraction, den > 0.
struct Rational {
  __int128 num = 0;
  __int128 den = 1;
};

// A real number, exact when `exact`.
struct Real {
  bool exact = true;
  Rational q;            // the value when exact
  double approx = 0;     // always set
  bool decimal = false;  // written with a decimal point somewhere ("0.5", "1.5/3")
};

struct MathAnswer {
  bool is_number = false;
  Real value;
  std::optional<Real> percent_base;  // "50%": value 1/2, base 50
  std::string text;                  // canonical text (spaces and wrappers removed)
};

// LaTeX and plain text -> value. A text that is not a number gives is_number = false.
MathAnswer ParseMathAnswer(const std::string& text);

// Whether `pred` gives the same answer as `gold` (the rules above; symmetric except where a
// percentage is involved, which is symmetric too).
bool MathEquivalent(const MathAnswer& gold, const MathAnswer& pred);

}  // namespace rlforge::reward
