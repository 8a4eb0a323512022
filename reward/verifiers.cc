#include "reward/verifiers.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "models/unicode_text.h"

namespace rlforge::reward {

const char* ScoreStatusName(ScoreStatus s) {
  switch (s) {
    case ScoreStatus::kOk:
      return "ok";
    case ScoreStatus::kError:
      return "error";
    case ScoreStatus::kNotFinite:
      return "not_finite";
    case ScoreStatus::kTimeout:
      return "timeout";
  }
  return "?";
}

namespace {

std::optional<std::string> Boxed(const std::string& s) {
  const std::string key = "\\boxed{";
  const size_t at = s.rfind(key);
  if (at == std::string::npos) return std::nullopt;
  int depth = 1;
  for (size_t i = at + key.size(); i < s.size(); ++i) {
    if (s[i] == '{') ++depth;
    if (s[i] == '}' && --depth == 0) return s.substr(at + key.size(), i - at - key.size());
  }
  return std::nullopt;  // unclosed
}

std::optional<std::string> AnswerIs(const std::string& s) {
  const std::string lower = absl::AsciiStrToLower(s);
  size_t best = std::string::npos, len = 0;
  for (const std::string key : {"answer is", "answer:"}) {
    const size_t at = lower.rfind(key);
    if (at != std::string::npos && (best == std::string::npos || at > best)) {
      best = at;
      len = key.size();
    }
  }
  if (best == std::string::npos) return std::nullopt;
  std::string rest = s.substr(best + len);
  const size_t nl = rest.find('\n', rest.find_first_not_of(" \t:"));
  if (nl != std::string::npos) rest = rest.substr(0, nl);
  const size_t start = rest.find_first_not_of(" \t:");
  if (start == std::string::npos) return std::nullopt;
  return rest.substr(start);
}

std::optional<std::string> LastNumber(const std::string& s) {
  std::optional<std::string> last;
  for (size_t i = 0; i < s.size();) {
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) {
      ++i;
      continue;
    }
    size_t b = i;
    if (b > 0 && s[b - 1] == '-') --b;
    size_t e = i;
    while (e < s.size() && (std::isdigit(static_cast<unsigned char>(s[e])) ||
                            ((s[e] == ',' || s[e] == '.') && e + 1 < s.size() &&
                             std::isdigit(static_cast<unsigned char>(s[e + 1]))))) {
      ++e;
    }
    last = s.substr(b, e - b);
    i = e;
  }
  return last;
}

class ExactAnswer final : public Reward {
 public:
  ExactAnswer(Extract e, bool cs) : extract_(e), case_sensitive_(cs) {}
  SampleScore ScoreOne(const Sample& s) const override {
    auto got = ExtractAnswer(s.response, extract_, /*numeric=*/false);
    if (!got) return SampleScore::Ok(0);
    return SampleScore::Ok(
        NormalizeAnswer(*got, case_sensitive_) == NormalizeAnswer(s.answer, case_sensitive_) ? 1.0
                                                                                             : 0.0);
  }

 private:
  Extract extract_;
  bool case_sensitive_;
};

class Numeric final : public Reward {
 public:
  Numeric(Extract e, double a, double r) : extract_(e), abs_tol_(a), rel_tol_(r) {}
  SampleScore ScoreOne(const Sample& s) const override {
    auto ref = ParseNumber(NormalizeAnswer(s.answer, true));
    if (!ref) {
      return SampleScore::Error(absl::StrCat("reference answer '", s.answer, "' is not a number"));
    }
    auto got = ExtractAnswer(s.response, extract_, /*numeric=*/true);
    if (!got) return SampleScore::Ok(0);
    auto x = ParseNumber(NormalizeAnswer(*got, true));
    if (!x) {
      auto inner = LastNumber(*got);
      if (inner) x = ParseNumber(*inner);
    }
    if (!x) return SampleScore::Ok(0);
    return SampleScore::Ok(std::fabs(*x - *ref) <= abs_tol_ + rel_tol_ * std::fabs(*ref) ? 1.0
                                                                                         : 0.0);
  }

 private:
  Extract extract_;
  double abs_tol_, rel_tol_;
};

class RegexFormat final : public Reward {
 public:
  RegexFormat(models::UnicodeRegex re, int32_t limit_ms)
      : re_(std::move(re)), limit_ms_(limit_ms) {}
  SampleScore ScoreOne(const Sample& s) const override {
    auto found = re_.Contains(s.response, limit_ms_);
    if (!found.ok()) return SampleScore::Error(std::string(found.status().message()));
    return SampleScore::Ok(*found ? 1.0 : 0.0);
  }

 private:
  models::UnicodeRegex re_;
  int32_t limit_ms_;
};

class LengthPenalty final : public Reward {
 public:
  LengthPenalty(int64_t max_length, int64_t buffer, bool tokens)
      : max_(max_length), buffer_(buffer), tokens_(tokens) {}
  SampleScore ScoreOne(const Sample& s) const override {
    int64_t len = 0;
    if (tokens_ && s.response_tokens >= 0) {
      len = s.response_tokens;
    } else {
      for (size_t i = 0; i < s.response.size(); i += models::Utf8CharLen(s.response, i)) ++len;
    }
    if (len > max_) return SampleScore::Ok(-1.0);
    const int64_t free_until = max_ - buffer_;
    if (len <= free_until) return SampleScore::Ok(0.0);
    return SampleScore::Ok(static_cast<double>(free_until - len) / static_cast<double>(buffer_));
  }

 private:
  int64_t max_, buffer_;
  bool tokens_;
};

}  // namespace

std::optional<std::string> ExtractAnswer(const std::string& response, Extract how, bool numeric) {
  switch (how) {
    case Extract::kBoxed:
      return Boxed(response);
    case Extract::kAnswerIs:
      return AnswerIs(response);
    case Extract::kLastNumber:
      return LastNumber(response);
    case Extract::kFull:
      return response;
    case Extract::kAuto:
      if (auto b = Boxed(response)) return b;
      if (auto a = AnswerIs(response)) return a;
      return numeric ? LastNumber(response) : std::optional<std::string>(response);
  }
  return std::nullopt;
}

std::string NormalizeAnswer(const std::string& text, bool case_sensitive) {
  std::string out;
  bool space = false;
  for (char c : text) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      space = !out.empty();
      continue;
    }
    if (space) out.push_back(' ');
    space = false;
    out.push_back(c);
  }
  // Peel trailing punctuation and wrappers ($ quotes * `) until nothing changes:
  // "**$42$.**" -> "42".
  const std::string trailing = ".,;:!? ", wrappers = "$\"'*`";
  for (bool changed = true; changed && !out.empty();) {
    changed = false;
    if (trailing.find(out.back()) != std::string::npos ||
        wrappers.find(out.back()) != std::string::npos) {
      out.pop_back();
      changed = true;
    }
    if (!out.empty() && (out.front() == ' ' || wrappers.find(out.front()) != std::string::npos)) {
      out.erase(out.begin());
      changed = true;
    }
  }
  if (!case_sensitive) absl::AsciiStrToLower(&out);
  return out;
}

std::optional<double> ParseNumber(const std::string& text) {
  std::string t;
  for (char c : text) {
    if (c != ',' && c != ' ') t.push_back(c);
  }
  if (!t.empty() && t.back() == '%') t.pop_back();
  if (!t.empty() && t.front() == '+') t.erase(t.begin());
  if (t.empty() ||
      !(std::isdigit(static_cast<unsigned char>(t[0])) || t[0] == '-' || t[0] == '.')) {
    return std::nullopt;
  }
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::unique_ptr<Reward> MakeExactAnswer(Extract extract, bool case_sensitive) {
  return std::make_unique<ExactAnswer>(extract, case_sensitive);
}

std::unique_ptr<Reward> MakeNumeric(Extract extract, double abs_tol, double rel_tol) {
  return std::make_unique<Numeric>(extract, abs_tol, rel_tol);
}

absl::StatusOr<std::unique_ptr<Reward>> MakeRegexFormat(const std::string& pattern, bool full_match,
                                                        double time_limit_s) {
  auto re =
      models::UnicodeRegex::Compile(full_match ? absl::StrCat("\\A(?:", pattern, ")\\z") : pattern);
  if (!re.ok()) return re.status();
  const double ms = std::clamp(time_limit_s * 1000.0, 1.0, 2.0e9);
  return std::unique_ptr<Reward>(
      std::make_unique<RegexFormat>(*std::move(re), static_cast<int32_t>(ms)));
}

std::unique_ptr<Reward> MakeLengthPenalty(int64_t max_length, int64_t buffer, bool tokens) {
  return std::make_unique<LengthPenalty>(max_length, buffer, tokens);
}

}  // namespace rlforge::reward
