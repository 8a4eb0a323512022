#include "templating/lexer.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace rlforge::templating::internal {
namespace {

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}
bool IsNameStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsNameChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Longest first, so "//" wins over "/".
constexpr const char* kOperators[] = {"==", "!=", "<=", ">=", "//", "**", "<", ">", "+",
                                      "-",  "*",  "/",  "%",  "~",  "|",  ".", ",", ":",
                                      "(",  ")",  "[",  "]",  "{",  "}",  "="};

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') newlines_.push_back(i);
    }
  }

  std::vector<Token> Run() {
    size_t pos = 0;
    while (pos < src_.size()) {
      const size_t open = FindOpen(pos);
      const size_t text_end = open == std::string::npos ? src_.size() : open;
      std::string text = src_.substr(pos, text_end - pos);
      if (strip_leading_) {
        text.erase(0, std::find_if_not(text.begin(), text.end(), IsSpace) - text.begin());
        strip_leading_ = false;
      }
      if (open == std::string::npos) {
        EmitText(std::move(text), pos);
        break;
      }
      const char kind = src_[open + 1];
      const char sign = open + 2 < src_.size() ? src_[open + 2] : '\0';
      if (sign == '-') {
        text.erase(std::find_if_not(text.rbegin(), text.rend(), IsSpace).base(), text.end());
      } else if (sign != '+' && kind != '{') {
        LStripBlock(text, pos);
      }
      EmitText(std::move(text), pos);
      pos = open + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      pos = kind == '#' ? SkipComment(open, pos) : LexTag(open, kind, pos);
    }
    out_.push_back(Make(Token::Kind::kEnd, "", src_.size()));
    return std::move(out_);
  }

 private:
  size_t FindOpen(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && std::strchr("{%#", src_[i + 1]) != nullptr) return i;
    }
    return std::string::npos;
  }

  // lstrip_blocks: spaces and tabs between the line's start and a block or comment tag go.
  void LStripBlock(std::string& text, size_t text_start) const {
    const size_t nl = text.rfind('\n');
    const size_t line_start = nl == std::string::npos ? 0 : nl + 1;
    const bool at_line_start =
        nl != std::string::npos || text_start == 0 || src_[text_start - 1] == '\n';
    if (!at_line_start) return;
    if (std::all_of(text.begin() + line_start, text.end(), IsSpace)) text.resize(line_start);
  }

  // After a block or comment end: "-" strips all following whitespace, "+" nothing, and
  // otherwise trim_blocks drops one newline.
  size_t AfterBlockEnd(size_t pos, char sign) {
    if (sign == '-') {
      strip_leading_ = true;
    } else if (sign != '+' && pos < src_.size() && src_[pos] == '\n') {
      ++pos;
    }
    return pos;
  }

  size_t SkipComment(size_t open, size_t pos) {
    const size_t close = src_.find("#}", pos);
    if (close == std::string::npos) Fail(open, "unterminated comment (no '#}')");
    const char sign = close > pos ? src_[close - 1] : '\0';
    return AfterBlockEnd(close + 2, sign);
  }

  size_t LexTag(size_t open, char kind, size_t pos) {
    const bool block = kind == '%';
    out_.push_back(Make(block ? Token::Kind::kBlockBegin : Token::Kind::kVarBegin, "", open));
    const char closer = block ? '%' : '}';
    std::string open_brackets;  // a "}}" closing a dict literal does not end the tag
    while (true) {
      while (pos < src_.size() && IsSpace(src_[pos])) ++pos;
      if (pos >= src_.size()) Fail(open, block ? "unterminated '{%' tag" : "unterminated '{{'");
      const char c = src_[pos];
      const bool marked = (c == '-' || c == '+') && pos + 2 < src_.size() &&
                          src_[pos + 1] == closer && src_[pos + 2] == '}';
      const bool in_dict = !block && !open_brackets.empty() && open_brackets.back() == '{';
      if (!in_dict && (marked || (c == closer && pos + 1 < src_.size() && src_[pos + 1] == '}'))) {
        out_.push_back(Make(block ? Token::Kind::kBlockEnd : Token::Kind::kVarEnd, "", pos));
        const char sign = marked ? c : '\0';
        pos += marked ? 3 : 2;
        if (block) return AfterBlockEnd(pos, sign);
        if (sign == '-') strip_leading_ = true;
        return pos;
      }
      pos = LexExpressionToken(pos, open_brackets);
    }
  }

  size_t LexExpressionToken(size_t pos, std::string& open_brackets) {
    const char c = src_[pos];
    if (IsNameStart(c)) {
      size_t end = pos;
      while (end < src_.size() && IsNameChar(src_[end])) ++end;
      out_.push_back(Make(Token::Kind::kName, src_.substr(pos, end - pos), pos));
      return end;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) return LexNumber(pos);
    if (c == '\'' || c == '"') return LexString(pos);
    for (const char* op : kOperators) {
      const size_t len = std::strlen(op);
      if (src_.compare(pos, len, op) != 0) continue;
      if (len == 1 && std::strchr("([{", op[0]) != nullptr) open_brackets += op[0];
      if (len == 1 && std::strchr(")]}", op[0]) != nullptr && !open_brackets.empty()) {
        open_brackets.pop_back();
      }
      out_.push_back(Make(Token::Kind::kOp, op, pos));
      return pos + len;
    }
    Fail(pos, absl::StrCat("unexpected character '", std::string(1, c), "'"));
    return pos;
  }

  size_t LexNumber(size_t pos) {
    size_t end = pos;
    while (end < src_.size() && std::isdigit(static_cast<unsigned char>(src_[end]))) ++end;
    bool is_float = false;
    if (end + 1 < src_.size() && src_[end] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[end + 1]))) {
      is_float = true;
      ++end;
      while (end < src_.size() && std::isdigit(static_cast<unsigned char>(src_[end]))) ++end;
    }
    if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
      size_t e = end + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      if (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) {
        is_float = true;
        end = e;
        while (end < src_.size() && std::isdigit(static_cast<unsigned char>(src_[end]))) ++end;
      }
    }
    const std::string text = src_.substr(pos, end - pos);
    Token t = Make(is_float ? Token::Kind::kFloat : Token::Kind::kInt, text, pos);
    if (is_float) {
      t.float_value = std::stod(text);
    } else {
      try {
        t.int_value = std::stoll(text);
      } catch (const std::out_of_range&) {
        Fail(pos, absl::StrCat("integer ", text, " is too large"));
      }
    }
    out_.push_back(std::move(t));
    return end;
  }

  size_t LexString(size_t pos) {
    const char quote = src_[pos];
    std::string value;
    size_t i = pos + 1;
    for (; i < src_.size() && src_[i] != quote; ++i) {
      if (src_[i] != '\\' || i + 1 >= src_.size()) {
        value += src_[i];
        continue;
      }
      const char e = src_[++i];
      switch (e) {
        case 'n':
          value += '\n';
          break;
        case 't':
          value += '\t';
          break;
        case 'r':
          value += '\r';
          break;
        case '0':
          value += '\0';
          break;
        case '\\':
        case '\'':
        case '"':
          value += e;
          break;
        case '\n':
          break;  // a line continuation
        default:
          value += '\\';
          value += e;
      }
    }
    if (i >= src_.size()) Fail(pos, "unterminated string");
    out_.push_back(Make(Token::Kind::kString, std::move(value), pos));
    return i + 1;
  }

  void EmitText(std::string text, size_t pos) {
    if (!text.empty()) out_.push_back(Make(Token::Kind::kText, std::move(text), pos));
  }

  Token Make(Token::Kind kind, std::string text, size_t offset) const {
    Token t;
    t.kind = kind;
    t.text = std::move(text);
    Locate(offset, t.line, t.col);
    return t;
  }

  void Locate(size_t offset, int& line, int& col) const {
    const auto it = std::lower_bound(newlines_.begin(), newlines_.end(), offset);
    line = static_cast<int>(it - newlines_.begin()) + 1;
    const size_t line_start = it == newlines_.begin() ? 0 : *(it - 1) + 1;
    col = static_cast<int>(offset - line_start) + 1;
  }

  [[noreturn]] void Fail(size_t offset, std::string message) const {
    TemplateError e{std::move(message)};
    Locate(offset, e.line, e.col);
    throw e;
  }

  std::string src_;
  std::vector<size_t> newlines_;
  std::vector<Token> out_;
  bool strip_leading_ = false;  // the last tag ended with "-"
};

std::string Normalize(const std::string& source) {
  std::string s;
  s.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      s += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      s += source[i];
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();  // keep_trailing_newline=False
  return s;
}

}  // namespace

std::vector<Token> Tokenize(const std::string& source) { return Lexer(Normalize(source)).Run(); }

}  // namespace rlforge::templating::internal
