#include "reward/math_value.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"

namespace rlforge::reward {

namespace {

using i128 = __int128;

// ---- Exact arithmetic: every step checks for overflow and gives up (nullopt) on it. ----

i128 Abs(i128 a) { return a < 0 ? -a : a; }

i128 Gcd(i128 a, i128 b) {
  a = Abs(a);
  b = Abs(b);
  while (b != 0) a = std::exchange(b, a % b);
  return a;
}

std::optional<Rational> Reduced(i128 num, i128 den) {
  if (den == 0) return std::nullopt;
  if (den < 0) {
    num = -num;
    den = -den;
  }
  const i128 g = Gcd(num, den);
  if (g > 1) {
    num /= g;
    den /= g;
  }
  return Rational{num, den};
}

std::optional<i128> Mul(i128 a, i128 b) {
  i128 out;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

std::optional<Rational> Add(const Rational& a, const Rational& b) {
  auto x = Mul(a.num, b.den), y = Mul(b.num, a.den), d = Mul(a.den, b.den);
  i128 n;
  if (!x || !y || !d || __builtin_add_overflow(*x, *y, &n)) return std::nullopt;
  return Reduced(n, *d);
}

std::optional<Rational> Times(const Rational& a, const Rational& b) {
  const i128 g1 = std::max<i128>(1, Gcd(a.num, b.den)), g2 = std::max<i128>(1, Gcd(b.num, a.den));
  auto n = Mul(a.num / g1, b.num / g2), d = Mul(a.den / g2, b.den / g1);
  if (!n || !d) return std::nullopt;
  return Reduced(*n, *d);
}

std::optional<Rational> Inverse(const Rational& a) { return Reduced(a.den, a.num); }

double ToDouble(const Rational& q) {
  return static_cast<double>(static_cast<long double>(q.num) / static_cast<long double>(q.den));
}

// The integer r >= 0 with r^n == x, if there is one.
std::optional<i128> ExactRoot(i128 x, int n) {
  if (x < 0) return std::nullopt;
  const double guess = std::round(std::pow(static_cast<double>(x), 1.0 / n));
  for (double r = std::max(0.0, guess - 1); r <= guess + 1; ++r) {
    std::optional<i128> p = 1;
    for (int k = 0; k < n && p; ++k) p = Mul(*p, static_cast<i128>(r));
    if (p && *p == x) return static_cast<i128>(r);
  }
  return std::nullopt;
}

// ---- Reals: exact when the exact step succeeds, else a double. ----

Real FromRational(const Rational& q, bool decimal) { return {true, q, ToDouble(q), decimal}; }
Real Approx(double v, bool decimal) { return {false, {}, v, decimal}; }

enum class Op { kAdd, kSub, kMul, kDiv };

std::optional<Real> Apply(Op op, const Real& a, const Real& b) {
  const bool decimal = a.decimal || b.decimal;
  if (op == Op::kDiv && b.approx == 0 && (!b.exact || b.q.num == 0)) return std::nullopt;
  if (a.exact && b.exact) {
    std::optional<Rational> q;
    if (op == Op::kAdd) q = Add(a.q, b.q);
    if (op == Op::kSub) q = Add(a.q, Rational{-b.q.num, b.q.den});
    if (op == Op::kMul) q = Times(a.q, b.q);
    if (op == Op::kDiv) q = Inverse(b.q).has_value() ? Times(a.q, *Inverse(b.q)) : std::nullopt;
    if (q) return FromRational(*q, decimal);
  }
  const double x = a.approx, y = b.approx;
  const double v = op == Op::kAdd ? x + y : op == Op::kSub ? x - y : op == Op::kMul ? x * y : x / y;
  if (!std::isfinite(v)) return std::nullopt;
  return Approx(v, decimal);
}

// The n-th root (n >= 2): exact when numerator and denominator are perfect powers.
std::optional<Real> Root(const Real& a, int n) {
  if (a.approx < 0 && n % 2 == 0) return std::nullopt;  // not a real number
  if (a.exact) {
    const bool negative = a.q.num < 0;
    auto rn = ExactRoot(Abs(a.q.num), n), rd = ExactRoot(a.q.den, n);
    if (rn && rd) return FromRational(*Reduced(negative ? -*rn : *rn, *rd), a.decimal);
  }
  const double v = a.approx < 0 ? -std::pow(-a.approx, 1.0 / n) : std::pow(a.approx, 1.0 / n);
  return Approx(v, a.decimal);
}

std::optional<Real> Power(const Real& base, const Real& exponent) {
  const bool decimal = base.decimal || exponent.decimal;
  if (base.exact && exponent.exact && Abs(exponent.q.num) <= 64 && exponent.q.den <= 8) {
    std::optional<Rational> p = Rational{1, 1};
    for (i128 k = 0; k < Abs(exponent.q.num) && p; ++k) p = Times(*p, base.q);
    if (p && exponent.q.num < 0) p = Inverse(*p);
    if (p) {
      Real r = FromRational(*p, decimal);
      return exponent.q.den == 1 ? std::optional<Real>(r)
                                 : Root(r, static_cast<int>(exponent.q.den));
    }
  }
  const double v = std::pow(base.approx, exponent.approx);
  if (!std::isfinite(v)) return std::nullopt;
  return Approx(v, decimal);
}

// ---- Text -> expression. ----

// A parsed expression; `percent_base` survives only while the expression is a lone "X%".
struct Term {
  Real v;
  std::optional<Real> percent_base;
};

// Recursive descent over normalised text:
//   sum := product (('+' | '-') product)*      product := unary (('*' | '/' | implicit) unary)*
//   unary := ('-' | '+') unary | power         power := atom ('^' argument)? '%'?
//   atom := number | (sum) | {sum} | \frac arg arg | \sqrt[n] arg | \pi
// A failed optional part backtracks, so "5 - x" parses as 5 with " - x" left over.
class Parser {
 public:
  explicit Parser(const std::string& s) : s_(s) {}
  std::optional<Term> Sum();
  size_t pos() const { return i_; }

 private:
  // operand (op operand)*: read_op() reads an operator, or nullopt to stop.
  template <typename ReadOp>
  std::optional<Term> Chain(std::optional<Term> (Parser::*operand)(), ReadOp read_op);
  std::optional<Term> Product();
  std::optional<Term> Unary();
  std::optional<Term> PowerTerm();
  std::optional<Real> Atom();
  std::optional<Real> Argument();
  std::optional<Real> Number();
  std::optional<Real> Closed(char close);
  void SkipSpace() {
    while (i_ < s_.size() && s_[i_] == ' ') ++i_;
  }
  bool Eat(const std::string& token) {
    SkipSpace();
    if (s_.compare(i_, token.size(), token) != 0) return false;
    // A command must not run on into letters: "\pi" is not the start of "\pitchfork".
    const size_t end = i_ + token.size();
    if (token[0] == '\\' && end < s_.size() && std::isalpha(static_cast<unsigned char>(s_[end]))) {
      return false;
    }
    i_ = end;
    return true;
  }
  bool Digit(size_t at) const {
    return at < s_.size() && std::isdigit(static_cast<unsigned char>(s_[at]));
  }

  const std::string& s_;
  size_t i_ = 0;
};

template <typename ReadOp>
std::optional<Term> Parser::Chain(std::optional<Term> (Parser::*operand)(), ReadOp read_op) {
  std::optional<Term> acc = (this->*operand)();
  while (acc) {
    const size_t save = i_;
    const std::optional<Op> op = read_op();
    std::optional<Term> rhs = op ? (this->*operand)() : std::nullopt;
    std::optional<Real> v = rhs ? Apply(*op, acc->v, rhs->v) : std::nullopt;
    if (!v) {
      i_ = save;
      break;
    }
    acc = Term{*v, std::nullopt};
  }
  return acc;
}

std::optional<Term> Parser::Sum() {
  return Chain(&Parser::Product, [this]() -> std::optional<Op> {
    if (Eat("+")) return Op::kAdd;
    if (Eat("-")) return Op::kSub;
    return std::nullopt;
  });
}

std::optional<Term> Parser::Product() {
  return Chain(&Parser::Unary, [this]() -> std::optional<Op> {
    if (Eat("/")) return Op::kDiv;
    if (Eat("*")) return Op::kMul;
    // Implicit multiplication only before a command or a parenthesis: 2\sqrt{3}, 3(4+1).
    SkipSpace();
    if (i_ < s_.size() && (s_[i_] == '\\' || s_[i_] == '(')) return Op::kMul;
    return std::nullopt;
  });
}

std::optional<Term> Parser::Unary() {
  if (Eat("-")) {
    std::optional<Term> t = Unary();
    if (!t) return std::nullopt;
    std::optional<Real> v = Apply(Op::kSub, FromRational({0, 1}, false), t->v);
    if (!v) return std::nullopt;
    std::optional<Real> base;
    if (t->percent_base) base = Apply(Op::kSub, FromRational({0, 1}, false), *t->percent_base);
    return Term{*v, base};
  }
  if (Eat("+")) return Unary();
  return PowerTerm();
}

std::optional<Term> Parser::PowerTerm() {
  std::optional<Real> base = Atom();
  if (!base) return std::nullopt;
  if (Eat("^")) {
    std::optional<Real> e = Argument();
    if (e) base = Power(*base, *e);
    if (!base) return std::nullopt;
  }
  if (Eat("%")) {
    std::optional<Real> v = Apply(Op::kDiv, *base, FromRational({100, 1}, false));
    return Term{*v, *base};
  }
  return Term{*base, std::nullopt};
}

std::optional<Real> Parser::Closed(char close) {
  std::optional<Term> t = Sum();
  if (!t || !Eat(std::string(1, close))) return std::nullopt;
  return t->v;
}

std::optional<Real> Parser::Atom() {
  SkipSpace();
  if (Eat("(")) return Closed(')');
  if (Eat("{")) return Closed('}');
  if (Eat("\\frac")) {
    std::optional<Real> a = Argument();
    std::optional<Real> b = a ? Argument() : std::nullopt;
    return b ? Apply(Op::kDiv, *a, *b) : std::nullopt;
  }
  if (Eat("\\sqrt")) {
    int n = 2;
    if (Eat("[")) {
      std::optional<Real> index = Closed(']');
      if (!index || !index->exact || index->q.den != 1 || index->q.num < 2 || index->q.num > 64) {
        return std::nullopt;
      }
      n = static_cast<int>(index->q.num);
    }
    std::optional<Real> a = Argument();
    return a ? Root(*a, n) : std::nullopt;
  }
  if (Eat("\\pi")) return Approx(M_PI, false);
  return Number();
}

// A command argument: {sum}, or one digit as in \frac12.
std::optional<Real> Parser::Argument() {
  SkipSpace();
  if (Eat("{")) return Closed('}');
  if (!Digit(i_)) return std::nullopt;
  return FromRational({s_[i_++] - '0', 1}, false);
}

// 42, 1,234,567 (groups of three), 3.25, .5
std::optional<Real> Parser::Number() {
  SkipSpace();
  std::string digits;
  size_t i = i_;
  while (Digit(i)) {
    digits.push_back(s_[i++]);
    const bool separator = i < s_.size() && s_[i] == ',' && Digit(i + 1) && Digit(i + 2) &&
                           Digit(i + 3) && !Digit(i + 4);
    if (separator) ++i;
  }
  size_t decimals = 0;
  if (i < s_.size() && s_[i] == '.' && Digit(i + 1)) {
    for (++i; Digit(i); ++i, ++decimals) digits.push_back(s_[i]);
  }
  if (digits.empty()) return std::nullopt;
  i_ = i;
  const bool decimal = decimals > 0;
  if (digits.size() > 36)
    return Approx(std::strtod(digits.c_str(), nullptr) / std::pow(10.0, decimals), decimal);
  i128 num = 0, den = 1;
  for (char c : digits) num = num * 10 + (c - '0');
  for (size_t k = 0; k < decimals; ++k) den *= 10;
  return FromRational(*Reduced(num, den), decimal);
}

// ---- Normalisation. ----

// Replaces \text{X} (and \textbf, \mathrm, \mbox, ...) by " X ".
std::string UnwrapText(std::string s) {
  for (const std::string cmd :
       {"\\text", "\\textbf", "\\textrm", "\\mathrm", "\\mathbf", "\\mbox", "\\textit"}) {
    for (size_t at = s.find(cmd + "{"); at != std::string::npos; at = s.find(cmd + "{", at)) {
      const size_t open = at + cmd.size();
      int depth = 0;
      size_t close = open;
      for (; close < s.size(); ++close) {
        if (s[close] == '{') ++depth;
        if (s[close] == '}' && --depth == 0) break;
      }
      if (close >= s.size()) break;  // unbalanced: leave it
      s = s.substr(0, at) + " " + s.substr(open + 1, close - open - 1) + " " + s.substr(close + 1);
    }
  }
  return s;
}

std::string Normalize(const std::string& text) {
  std::string s = absl::StrReplaceAll(UnwrapText(text), {{"\\left", ""},
                                                         {"\\right", ""},
                                                         {"\\dfrac", "\\frac"},
                                                         {"\\tfrac", "\\frac"},
                                                         {"^{\\circ}", ""},
                                                         {"^\\circ", ""},
                                                         {"\\circ", ""},
                                                         {"\\degree", ""},
                                                         {"\xC2\xB0", ""},
                                                         {"\\%", "%"},
                                                         {"\\$", ""},
                                                         {"$", ""},
                                                         {"\\!", ""},
                                                         {"\\,", ""},
                                                         {"\\;", ""},
                                                         {"\\:", ""},
                                                         {"\\ ", " "},
                                                         {"\\qquad", " "},
                                                         {"\\quad", " "},
                                                         {"\\displaystyle", ""},
                                                         {"{,}", ","},
                                                         {"\\cdot", "*"},
                                                         {"\\times", "*"},
                                                         {"\\div", "/"},
                                                         {"\xE2\x88\x92", "-"},
                                                         {"\\(", ""},
                                                         {"\\)", ""},
                                                         {"\\[", ""},
                                                         {"\\]", ""},
                                                         {"\xE2\x82\xAC", ""},
                                                         {"\xC2\xA3", ""},
                                                         {"\n", " "},
                                                         {"\t", " "}});
  // Peel trailing sentence punctuation and spaces: "12 cm." -> "12 cm".
  while (!s.empty() && std::string(".,;:!? ").find(s.back()) != std::string::npos) s.pop_back();
  std::string out;
  for (char c : s) {
    if (c == ' ' && (out.empty() || out.back() == ' ')) continue;
    out.push_back(c);
  }
  return out;
}

// What may follow a number and be ignored: unit words ("12 cm", "12cm", "5 apples per box").
// A single glued letter is not a unit ("2x" is an expression).
bool IsUnitSuffix(const std::string& rest) {
  const std::string t(absl::StripAsciiWhitespace(rest));
  if (t.empty()) return true;
  if (!std::isalpha(static_cast<unsigned char>(t[0]))) return false;
  const bool glued = rest[0] != ' ';
  if (glued && (t.size() < 2 || !std::isalpha(static_cast<unsigned char>(t[1])))) return false;
  for (size_t i = 0; i < t.size(); ++i) {
    const unsigned char c = t[i];
    if (std::isalpha(c) || c == ' ' || c == '.' || c == '/' || c == '-') continue;
    if (c == '^' && i + 1 < t.size() && std::isdigit(static_cast<unsigned char>(t[i + 1]))) {
      ++i;
      continue;
    }
    return false;
  }
  return true;
}

// Half to even at 6 decimal places, as sympy's round(6).
std::optional<i128> RoundedMicros(const Rational& q) {
  auto n = Mul(q.num, 1000000);
  if (!n) return std::nullopt;
  i128 f = *n / q.den, r = *n % q.den;
  if (r < 0) {
    --f;
    r += q.den;
  }
  if (2 * r > q.den || (2 * r == q.den && f % 2 != 0)) ++f;
  return f;
}

bool SameAtSixDecimals(const Real& a, const Real& b) {
  if (a.exact && b.exact) {
    auto x = RoundedMicros(a.q), y = RoundedMicros(b.q);
    if (x && y) return *x == *y;
  }
  return std::nearbyint(a.approx * 1e6) == std::nearbyint(b.approx * 1e6);
}

bool SameNumber(const Real& a, const Real& b) {
  if (a.decimal || b.decimal) return SameAtSixDecimals(a, b);
  if (a.exact && b.exact) return a.q.num == b.q.num && a.q.den == b.q.den;
  const double scale = std::max({1.0, std::fabs(a.approx), std::fabs(b.approx)});
  return std::fabs(a.approx - b.approx) <= 1e-12 * scale;
}

bool IsInteger(const Real& r) { return r.exact && r.q.den == 1 && !r.decimal; }

// "9%" = 9 when both are integers (math-verify's rule; 9% = 0.09 holds anyway).
bool PercentOf(const MathAnswer& pct, const MathAnswer& other) {
  return pct.percent_base && !other.percent_base && IsInteger(*pct.percent_base) &&
         IsInteger(other.value) && pct.percent_base->q.num == other.value.q.num;
}

}  // namespace

MathAnswer ParseMathAnswer(const std::string& text) {
  MathAnswer out;
  std::string s = Normalize(text);
  for (char c : s) {
    if (c != ' ') out.text.push_back(c);
  }
  // An equation gives its right-hand side: "x = 5" -> 5.
  const size_t eq = s.rfind('=');
  if (eq != std::string::npos &&
      (eq == 0 || std::string("<>!").find(s[eq - 1]) == std::string::npos)) {
    s = s.substr(eq + 1);
  }
  Parser parser(s);
  std::optional<Term> t = parser.Sum();
  if (!t || !IsUnitSuffix(s.substr(parser.pos()))) return out;
  out.is_number = true;
  out.value = t->v;
  out.percent_base = t->percent_base;
  return out;
}

bool MathEquivalent(const MathAnswer& gold, const MathAnswer& pred) {
  if (!gold.is_number || !pred.is_number) {
    return !gold.is_number && !pred.is_number && !gold.text.empty() && gold.text == pred.text;
  }
  return SameNumber(gold.value, pred.value) || PercentOf(gold, pred) || PercentOf(pred, gold);
}

}  // namespace rlforge::reward
