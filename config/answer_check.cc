#include "config/answer_check.h"

namespace rlforge {

const std::vector<std::string>& AnswerCheckNames() {
  static const std::vector<std::string> names = {"exact", "numeric", "math"};
  return names;
}

std::optional<AnswerCheck> ParseAnswerCheck(std::string_view name) {
  const auto& names = AnswerCheckNames();
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return static_cast<AnswerCheck>(i);
  }
  return std::nullopt;
}

const std::string& AnswerCheckName(AnswerCheck check) {
  return AnswerCheckNames()[static_cast<size_t>(check)];
}

}  // namespace rlforge
