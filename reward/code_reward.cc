#include "reward/code_reward.h"

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace rlforge::reward {

namespace {

class CodeReward final : public Reward {
 public:
  explicit CodeReward(CodeRewardOptions o) : o_(std::move(o)) {}

  SampleScore ScoreOne(const Sample& s) const override {
    absl::StatusOr<std::vector<std::string>> tests = ParseTests(s.answer);
    if (!tests.ok()) return SampleScore::Error(std::string(tests.status().message()));
    const std::string program = ExtractProgram(s.response);
    int passed = 0;
    for (const std::string& test : *tests) {
      absl::StatusOr<SandboxRun> run = RunInSandbox(
          {o_.interpreter, "-I", "main.py"}, {{"main.py", program + "\n\n" + test + "\n"}},
          o_.limits);
      if (!run.ok()) return SampleScore::Error(std::string(run.status().message()));
      passed += run->Passed() ? 1 : 0;
    }
    return SampleScore::Ok(static_cast<double>(passed) / static_cast<double>(tests->size()));
  }

 private:
  CodeRewardOptions o_;
};

}  // namespace

std::unique_ptr<Reward> MakeCodeReward(CodeRewardOptions options) {
  return std::make_unique<CodeReward>(std::move(options));
}

std::string ExtractProgram(const std::string& response) {
  const size_t close = response.rfind("```");
  if (close == std::string::npos || close == 0) return response;
  const size_t open = response.rfind("```", close - 1);
  if (open == std::string::npos) return response;
  const size_t body = response.find('\n', open);
  if (body == std::string::npos || body >= close) return response;
  return response.substr(body + 1, close - body - 1);
}

absl::StatusOr<std::vector<std::string>> ParseTests(const std::string& answer) {
  nlohmann::json j = nlohmann::json::parse(answer, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("tests")) j = j["tests"];
  if (!j.is_array() || j.empty()) {
    return absl::InvalidArgumentError(
        "code reward: the sample's answer is not a JSON list of tests (or {\"tests\": [...]})");
  }
  std::vector<std::string> tests;
  for (const auto& t : j) {
    if (!t.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("code reward: test ", tests.size(), " of the answer is not a string"));
    }
    tests.push_back(t.get<std::string>());
  }
  return tests;
}

}  // namespace rlforge::reward
