#include "models/unicode_text.h"

#include <unicode/normalizer2.h>
#include <unicode/regex.h>
#include <unicode/unistr.h>

#include "absl/strings/str_cat.h"

namespace rlforge::models {

std::pair<char32_t, size_t> Utf8Decode(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return {b0, 1};
  size_t len = 0;
  char32_t cp = 0;
  char32_t min = 0;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return {0xFFFD, 1};
  }
  if (i + len > s.size()) return {0xFFFD, 1};
  for (size_t k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return {0xFFFD, 1};
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {0xFFFD, 1};
  return {cp, len};
}

size_t Utf8CharLen(std::string_view s, size_t i) { return Utf8Decode(s, i).second; }

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool IsValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    auto [cp, len] = Utf8Decode(s, i);
    if (cp == 0xFFFD && !(len == 3 && s.substr(i, 3) == "\xEF\xBF\xBD")) return false;
    i += len;
  }
  return true;
}

namespace {

// UTF-16 copy of `s` plus, for each UTF-16 unit (and one past the end), its byte offset in s.
struct Utf16Text {
  icu::UnicodeString text;
  std::vector<size_t> byte_offset;
};

Utf16Text ToUtf16(std::string_view s) {
  Utf16Text u;
  u.byte_offset.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size();) {
    auto [cp, len] = Utf8Decode(s, i);
    const int32_t before = u.text.length();
    u.text.append(static_cast<UChar32>(cp));
    for (int32_t k = before; k < u.text.length(); ++k) u.byte_offset.push_back(i);
    i += len;
  }
  u.byte_offset.push_back(s.size());
  return u;
}

// Oniguruma's \s is Unicode White_Space; ICU's is narrower ([\t\n\f\r\p{Z}]: no \v, no U+0085).
std::string OnigToIcu(std::string_view p) {
  std::string out;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '\\' && i + 1 < p.size()) {
      if (p[i + 1] == 's') {
        out += "\\p{White_Space}";
      } else if (p[i + 1] == 'S') {
        out += "\\P{White_Space}";
      } else {
        out += p.substr(i, 2);
      }
      ++i;
    } else {
      out.push_back(p[i]);
    }
  }
  return out;
}

}  // namespace

struct UnicodeRegex::Impl {
  std::unique_ptr<icu::RegexPattern> pattern;
};

absl::StatusOr<UnicodeRegex> UnicodeRegex::Compile(std::string_view pattern) {
  UErrorCode status = U_ZERO_ERROR;
  UParseError parse_error;
  const std::string icu_pattern = OnigToIcu(pattern);
  auto impl = std::make_shared<Impl>();
  impl->pattern.reset(icu::RegexPattern::compile(icu::UnicodeString::fromUTF8(icu_pattern), 0,
                                                 parse_error, status));
  if (U_FAILURE(status)) {
    return absl::InvalidArgumentError(absl::StrCat("regex '", std::string(pattern),
                                                   "' does not compile (", u_errorName(status),
                                                   " at offset ", parse_error.offset, ")"));
  }
  UnicodeRegex r;
  r.impl_ = std::move(impl);
  return r;
}

std::vector<std::pair<size_t, size_t>> UnicodeRegex::FindAll(std::string_view utf8) const {
  std::vector<std::pair<size_t, size_t>> out;
  if (utf8.empty()) return out;
  const Utf16Text u = ToUtf16(utf8);
  UErrorCode status = U_ZERO_ERROR;
  std::unique_ptr<icu::RegexMatcher> m(impl_->pattern->matcher(u.text, status));
  if (U_FAILURE(status)) return out;
  while (m->find(status) && U_SUCCESS(status)) {
    const int32_t b = m->start(status);
    const int32_t e = m->end(status);
    if (U_FAILURE(status)) break;
    if (e > b) out.emplace_back(u.byte_offset[b], u.byte_offset[e]);
  }
  return out;
}

absl::StatusOr<bool> UnicodeRegex::Contains(std::string_view utf8, int32_t time_limit_ms) const {
  const Utf16Text u = ToUtf16(utf8);
  UErrorCode status = U_ZERO_ERROR;
  std::unique_ptr<icu::RegexMatcher> m(impl_->pattern->matcher(u.text, status));
  if (U_SUCCESS(status) && time_limit_ms > 0) m->setTimeLimit(time_limit_ms, status);
  if (U_FAILURE(status)) {
    return absl::InternalError(absl::StrCat("regex matcher: ", u_errorName(status)));
  }
  const bool found = m->find(status);
  if (status == U_REGEX_TIME_OUT) {
    return absl::DeadlineExceededError(
        absl::StrCat("regex gave up after its time limit (", time_limit_ms, " ms)"));
  }
  if (U_FAILURE(status)) {
    return absl::InternalError(absl::StrCat("regex match: ", u_errorName(status)));
  }
  return found;
}

std::string Normalize(std::string_view utf8, NormalForm form) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (form) {
    case NormalForm::kNFC:
      n = icu::Normalizer2::getNFCInstance(status);
      break;
    case NormalForm::kNFD:
      n = icu::Normalizer2::getNFDInstance(status);
      break;
    case NormalForm::kNFKC:
      n = icu::Normalizer2::getNFKCInstance(status);
      break;
    case NormalForm::kNFKD:
      n = icu::Normalizer2::getNFKDInstance(status);
      break;
  }
  if (U_FAILURE(status) || n == nullptr) return std::string(utf8);
  const icu::UnicodeString in = ToUtf16(utf8).text;
  if (n->isNormalized(in, status) && U_SUCCESS(status) && IsValidUtf8(utf8)) {
    return std::string(utf8);
  }
  status = U_ZERO_ERROR;
  icu::UnicodeString normalized = n->normalize(in, status);
  if (U_FAILURE(status)) return std::string(utf8);
  std::string out;
  normalized.toUTF8String(out);
  return out;
}

}  // namespace rlforge::models
