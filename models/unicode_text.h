// Unicode helpers for the tokenizers: UTF-8 walking, Unicode-aware regex, normalization.
//
// UTF-8 text -> (UTF-16 for ICU, with a byte-offset map) -> matches as UTF-8 byte ranges
//
// Built on ICU (Debian's libicu-dev). Matches are reported as byte ranges of the caller's
// UTF-8 string, so invalid bytes survive untouched (ICU sees them as U+FFFD). Compiled
// patterns are immutable and safe to use from many threads at once.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace rlforge::models {

// Length in bytes of the UTF-8 character starting at s[i]; 1 for an invalid or truncated one.
size_t Utf8CharLen(std::string_view s, size_t i);
// The code point at s[i] (U+FFFD for an invalid sequence) and its length in bytes.
std::pair<char32_t, size_t> Utf8Decode(std::string_view s, size_t i);
void AppendUtf8(char32_t cp, std::string* out);
bool IsValidUtf8(std::string_view s);

class UnicodeRegex {
 public:
  // `pattern` in the Oniguruma dialect of Hugging Face tokenizer.json files: \p{L}, \p{N},
  // (?i:...), (?!...). \s and \S mean Unicode White_Space, as in Oniguruma.
  static absl::StatusOr<UnicodeRegex> Compile(std::string_view pattern);
  // Byte ranges [begin, end) of every non-overlapping, non-empty match, left to right.
  std::vector<std::pair<size_t, size_t>> FindAll(std::string_view utf8) const;
  // Whether `utf8` contains a match, giving up after about `time_limit_ms` of matching work
  // (ICU's step-based limit; 0: none). A give-up is an error, so a pathological pattern cannot
  // spin forever.
  absl::StatusOr<bool> Contains(std::string_view utf8, int32_t time_limit_ms) const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

enum class NormalForm { kNFC, kNFD, kNFKC, kNFKD };
// Invalid UTF-8 becomes U+FFFD.
std::string Normalize(std::string_view utf8, NormalForm form);

}  // namespace rlforge::models
