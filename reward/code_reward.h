// The `code` reward: runs the program in a sample's response against the sample's test cases,
// each test in a sandbox of its own (sandbox.h), and scores the fraction that pass.
//
// response -> the last ```python (or bare ```) block, else the whole response = the program
// answer   -> a JSON list of tests (or {"tests": [...]}); a test is Python code that raises
//             (e.g. an assert) when the program is wrong
// each test: interpreter -I main.py, main.py = program + "\n\n" + test  -> passes if exit 0
//
// A program that fails, crashes, hangs or misbehaves fails its tests (the sandbox contains it).
// An answer that is not a test list, or a sandbox that cannot be set up, is an error for that
// sample, never a score of 0.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "reward/reward.h"
#include "reward/sandbox.h"

namespace rlforge::reward {

struct CodeRewardOptions {
  std::string interpreter = "/usr/bin/python3";
  SandboxLimits limits;  // per test
};

std::unique_ptr<Reward> MakeCodeReward(CodeRewardOptions options);

// The program a response holds: its last fenced block (```python or ```), else all of it.
std::string ExtractProgram(const std::string& response);

// The tests an answer holds: a JSON list of strings, or an object whose "tests" is one.
absl::StatusOr<std::vector<std::string>> ParseTests(const std::string& answer);

}  // namespace rlforge::reward
