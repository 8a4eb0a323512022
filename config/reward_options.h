// Job-file section `reward`: reward workers and the rewards they compute, combined with
// weights. Schema and cross-key rules in reward_config.cc; semantics in docs/rewards.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/choices.h"

namespace rlforge {

// Parameters of one reward; each kind reads only its own (others left at their defaults).
struct RewardParams {
  // exact_answer, numeric, math: how the answer is found in the response.
  AnswerExtract extract = AnswerExtract::kAuto;
  bool case_sensitive = false;   // exact_answer
  double abs_tol = 1e-6;         // numeric: |x - y| <= abs_tol + rel_tol * |y|
  double rel_tol = 0.0;
  std::string pattern;          // regex_format (ICU syntax, \p{L} etc.)
  bool full_match = false;      // regex_format: the whole response must match
  int64_t max_length = 0;       // length_penalty: DAPO soft overlong penalty
  int64_t buffer = 0;           //   penalty ramps from 0 at max_length - buffer to -1 at max_length
  LengthUnit unit = LengthUnit::kTokens;  // length_penalty: tokens (when the sample has them)
  std::string tag = "think";    // format: the reasoning block is <tag>...</tag>
  AnswerForm answer_form = AnswerForm::kText;  // format: what follows the block
  std::string path;                  // plugin: the shared library; python: the .py file
  std::vector<std::string> args;     // plugin: "key=value" strings passed to its create()
  std::string function;              // python: the function in `path`
  std::string interpreter = "/usr/bin/python3";  // python, code: the Python that runs it
  int64_t processes = 2;             // python: processes in the reward worker's pool
  int64_t memory_mb = 256;           // code: each test's address-space limit
  int64_t cpu_s = 2;                 // code: each test's CPU seconds
  double test_timeout_s = 5;         // code: each test's wall time
  int64_t max_processes = 16;        // code: processes a test may run at once
};

struct RewardSpec {
  std::string name;  // reported in metrics as reward/<name>
  RewardKind kind = RewardKind::kExactAnswer;  // a required key
  double weight = 1.0;
  double timeout_s = 0;  // per sample; 0: reward.timeout_s
  RewardParams params;
};

struct RewardOptions {
  int64_t workers = 1;
  bool external = false;
  // Reward workers in all, counting those that join a running job (0: workers); and the fewest
  // live ones a language-model round starts with (below it the job waits).
  int64_t max_workers = 0;
  int64_t min_workers = 1;
  double timeout_s = 10;  // per sample, for rewards that do not set their own
  std::vector<RewardSpec> rewards;
};

}  // namespace rlforge
