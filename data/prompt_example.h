// The unit of text data every language-model job consumes.
#pragma once

#include <string>

namespace rlforge {

// One prompt with what a job needs about it. SFT trains on prompt -> response; RL jobs verify
// a generated response against `answer`.
struct PromptExample {
  std::string prompt;
  std::string answer;    // the verifiable answer ("357"); may be empty for SFT-only data
  std::string response;  // the SFT target text; may be empty for RL-only data
};

// A DPO preference pair.
struct PreferenceExample {
  std::string prompt;
  std::string chosen;
  std::string rejected;
};

}  // namespace rlforge
