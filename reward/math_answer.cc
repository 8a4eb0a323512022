#include "reward/math_answer.h"

#include <cctype>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "reward/math_value.h"

namespace rlforge::reward {

namespace {

bool IsDigit(const std::string& s, size_t i) {
  return i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]));
}

// [begin, end) of a candidate answer in the text.
struct Span {
  size_t begin = 0, end = 0;
};

// Just past the number that starts at `i`: 1,234.5, 3/4, 50%, 50\%.
size_t NumberEnd(const std::string& s, size_t i) {
  while (IsDigit(s, i) || (s[i] == ',' && IsDigit(s, i + 1) && IsDigit(s, i + 2) &&
                           IsDigit(s, i + 3) && !IsDigit(s, i + 4))) {
    ++i;
  }
  if (i < s.size() && s[i] == '.' && IsDigit(s, i + 1)) {
    for (++i; IsDigit(s, i);) ++i;
  }
  if (i < s.size() && s[i] == '/' && IsDigit(s, i + 1)) {
    for (++i; IsDigit(s, i);) ++i;
  }
  if (s.compare(i, 1, "%") == 0) return i + 1;
  if (s.compare(i, 2, "\\%") == 0) return i + 2;
  return i;
}

// Every number token (with a directly preceding minus sign) in `s`.
std::vector<Span> NumberSpans(const std::string& s) {
  std::vector<Span> out;
  for (size_t i = 0; i < s.size();) {
    if (!IsDigit(s, i) && !(s[i] == '.' && IsDigit(s, i + 1))) {
      ++i;
      continue;
    }
    const size_t begin = i > 0 && s[i - 1] == '-' ? i - 1 : i;
    i = NumberEnd(s, i);
    out.push_back({begin, i});
  }
  return out;
}

// Every LaTeX math span: \(...\), \[...\], and $...$ / $$...$$ whose content has a command or
// no letters (so the prices in "costs $12 and $5 more" are not taken for one span).
std::vector<Span> LatexSpans(const std::string& s) {
  std::vector<Span> out;
  for (const auto& [open, close] :
       {std::pair<std::string, std::string>{"\\(", "\\)"}, {"\\[", "\\]"}}) {
    for (size_t at = s.find(open); at != std::string::npos; at = s.find(open, at + 1)) {
      const size_t end = s.find(close, at + 2);
      if (end == std::string::npos) break;
      out.push_back({at, end + 2});
    }
  }
  std::vector<size_t> dollars;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '$' || (i > 0 && s[i - 1] == '\\')) continue;
    dollars.push_back(i);
    if (i + 1 < s.size() && s[i + 1] == '$') ++i;  // $$ is one delimiter
  }
  for (size_t k = 0; k + 1 < dollars.size(); k += 2) {
    const size_t b = dollars[k], e = dollars[k + 1];
    const size_t from = b + (s.compare(b, 2, "$$") == 0 ? 2 : 1);
    const std::string content = from < e ? s.substr(from, e - from) : "";
    bool letters = false;
    for (char c : content) letters |= std::isalpha(static_cast<unsigned char>(c)) != 0;
    if (content.find('\\') == std::string::npos && letters) continue;
    out.push_back({b, e + (s.compare(e, 2, "$$") == 0 ? 2 : 1)});
  }
  return out;
}

// The first (by start) or last (by end) number or LaTeX span; a longer span wins a tie, so
// "$\frac{1}{2}$" beats the "2" inside it.
std::optional<std::string> PickMath(const std::string& s, bool last) {
  std::vector<Span> spans = NumberSpans(s);
  for (const Span& l : LatexSpans(s)) spans.push_back(l);
  const Span* best = nullptr;
  for (const Span& sp : spans) {
    const size_t len = sp.end - sp.begin, best_len = best ? best->end - best->begin : 0;
    const bool better =
        !best || (last ? sp.end > best->end || (sp.end == best->end && len > best_len)
                       : sp.begin < best->begin || (sp.begin == best->begin && len > best_len));
    if (better) best = &sp;
  }
  if (!best) return std::nullopt;
  return s.substr(best->begin, best->end - best->begin);
}

// The rest of the sentence: up to ". " or the end of the line.
std::string Sentence(const std::string& s) {
  std::string out = s.substr(0, s.find('\n'));
  const size_t stop = out.find(". ");
  return stop == std::string::npos ? out : out.substr(0, stop);
}

// "answer is X" / "answer: X" / "#### X". Words before the answer ("the answer is that she has
// 12") lead to the first number in the sentence.
std::optional<std::string> MarkedAnswer(const std::string& s) {
  std::optional<std::string> found;
  const size_t hashes = s.rfind("####");
  if (hashes != std::string::npos) {
    found = std::string(absl::StripAsciiWhitespace(Sentence(s.substr(hashes + 4))));
  } else {
    found = ExtractAnswer(s, Extract::kAnswerIs, /*numeric=*/false);
    if (found) found = Sentence(*found);
  }
  if (!found || found->empty()) return std::nullopt;
  const bool words = found->size() > 1 && std::isalpha(static_cast<unsigned char>((*found)[0])) &&
                     std::isalpha(static_cast<unsigned char>((*found)[1]));
  if (!words) return found;
  std::optional<std::string> first = PickMath(*found, /*last=*/false);
  return first ? first : found;
}

// The response without its reasoning block; nullopt when the block never closes (a response
// cut off while thinking has no answer).
std::optional<std::string> AfterThinking(const std::string& response) {
  const size_t close = response.rfind("</think>");
  if (close != std::string::npos) return response.substr(close + 8);
  if (response.find("<think>") != std::string::npos) return std::nullopt;
  return response;
}

class MathReward final : public Reward {
 public:
  explicit MathReward(Extract extract) : extract_(extract) {}
  SampleScore ScoreOne(const Sample& s) const override {
    if (absl::StripAsciiWhitespace(s.answer).empty()) {
      return SampleScore::Error("the reference answer is empty");
    }
    return SampleScore::Ok(MathVerify(s.answer, s.response, extract_) ? 1.0 : 0.0);
  }

 private:
  Extract extract_;
};

class ThinkFormat final : public Reward {
 public:
  ThinkFormat(const std::string& tag, AnswerForm answer)
      : open_("<" + tag + ">"), close_("</" + tag + ">"), answer_(answer) {}
  SampleScore ScoreOne(const Sample& s) const override {
    return SampleScore::Ok(Holds(s.response) ? 1.0 : 0.0);
  }

 private:
  static size_t Count(const std::string& s, const std::string& what) {
    size_t n = 0;
    for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
    return n;
  }
  bool Holds(const std::string& response) const {
    const std::string r(absl::StripLeadingAsciiWhitespace(response));
    if (r.compare(0, open_.size(), open_) != 0 || Count(r, open_) != 1 || Count(r, close_) != 1) {
      return false;
    }
    const size_t close = r.find(close_);
    const std::string reasoning = r.substr(open_.size(), close - open_.size());
    const std::string after = r.substr(close + close_.size());
    if (absl::StripAsciiWhitespace(reasoning).empty()) return false;
    switch (answer_) {
      case AnswerForm::kText:
        return !absl::StripAsciiWhitespace(after).empty();
      case AnswerForm::kBoxed:
        return ExtractAnswer(after, Extract::kBoxed, false).has_value();
      case AnswerForm::kMath: {
        std::optional<std::string> a = FindFinalAnswer(after, Extract::kAuto);
        return a && ParseMathAnswer(*a).is_number;
      }
    }
    return false;
  }

  std::string open_, close_;
  AnswerForm answer_;
};

}  // namespace

std::optional<std::string> FindFinalAnswer(const std::string& response, Extract how) {
  std::optional<std::string> text = AfterThinking(response);
  if (!text) return std::nullopt;
  switch (how) {
    case Extract::kBoxed:
      return ExtractAnswer(*text, Extract::kBoxed, false);
    case Extract::kAnswerIs:
      return MarkedAnswer(*text);
    case Extract::kLastNumber:
      return PickMath(*text, /*last=*/true);
    case Extract::kFull:
      return text;
    case Extract::kAuto:
      break;
  }
  if (auto boxed = ExtractAnswer(*text, Extract::kBoxed, false)) return boxed;
  if (auto marked = MarkedAnswer(*text)) return marked;
  if (auto math = PickMath(*text, /*last=*/true)) return math;
  const std::string whole(absl::StripAsciiWhitespace(*text));
  return whole.empty() ? std::nullopt : std::optional<std::string>(whole);
}

bool MathVerify(const std::string& gold, const std::string& response, Extract how) {
  MathAnswer reference = ParseMathAnswer(gold);
  if (!reference.is_number) {
    // A worked solution ("... #### 42") or a reference in a sentence.
    std::optional<std::string> inner = FindFinalAnswer(gold, Extract::kAuto);
    if (inner) {
      MathAnswer parsed = ParseMathAnswer(*inner);
      if (parsed.is_number) reference = std::move(parsed);
    }
  }
  std::optional<std::string> got = FindFinalAnswer(response, how);
  return got && MathEquivalent(reference, ParseMathAnswer(*got));
}

std::unique_ptr<Reward> MakeMath(Extract extract) { return std::make_unique<MathReward>(extract); }

std::unique_ptr<Reward> MakeThinkFormat(const std::string& tag, AnswerForm answer) {
  return std::make_unique<ThinkFormat>(tag, answer);
}

}  // namespace rlforge::reward
