// Small string utilities for error messages.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace rlforge {

// Levenshtein distance (insert, delete, substitute all cost 1).
int EditDistance(std::string_view a, std::string_view b);

// The candidate closest to `word`, or "" when none is close enough to be a
// plausible typo (distance at most max(2, |word|/3)).
std::string NearestWord(std::string_view word, const std::vector<std::string>& candidates);

// "a, b or c"
std::string JoinOr(const std::vector<std::string>& words);

// Human-readable byte count: "64 B", "1.5 KiB", "64.0 MiB".
std::string HumanBytes(double bytes);

}  // namespace rlforge
