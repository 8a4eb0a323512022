// JSONL datasets: one JSON object per line, read into PromptExample / PreferenceExample.
//
// file -> lines -> JSON object per line -> required string keys -> examples (file order)
//
//   SFT: {"prompt": ..., "response": ...}   (an "answer" key, when present, is kept)
//   RL:  {"prompt": ..., "answer": ...}
//   DPO: {"prompt": ..., "chosen": ..., "rejected": ...}
//   GSM8K (SFT and RL, a line with "question" and no "prompt"): {"question": ..., "answer":
//        "worked steps...\n#### 72"} -> prompt = question, response = the whole answer text,
//        answer = the text after its last "####" ("72").
// Blank lines are skipped; other keys are ignored (metadata). Every error names the file, the
// 1-based line and the key: "data/train.jsonl:14: key 'response': expected a string, got number".
#pragma once

#include <istream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/prompt_example.h"

namespace rlforge {

enum class JsonlFormat { kSft, kRl };

absl::StatusOr<std::vector<PromptExample>> ReadPromptJsonl(const std::string& path,
                                                           JsonlFormat format);
absl::StatusOr<std::vector<PreferenceExample>> ReadPreferenceJsonl(const std::string& path);

// Prompts for `rlforge generate`: one per line of `in` (called `name` in errors: a file or
// "stdin"). A line that starts with '{' is a JSON object whose "prompt" (or, GSM8K, "question")
// is the prompt, so prompts with newlines travel as JSONL; any other line is the prompt itself.
// Blank lines are skipped; no prompt at all is an error.
absl::StatusOr<std::vector<std::string>> ReadPromptLines(std::istream& in, const std::string& name);

// Writes examples as JSONL in the SFT format (prompt, response, and answer when non-empty).
absl::Status WritePromptJsonl(const std::string& path, const std::vector<PromptExample>& examples);

}  // namespace rlforge
