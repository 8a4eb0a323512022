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

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/prompt_example.h"

namespace rlforge {

enum class JsonlFormat { kSft, kRl };

absl::StatusOr<std::vector<PromptExample>> ReadPromptJsonl(const std::string& path,
                                                           JsonlFormat format);
absl::StatusOr<std::vector<PreferenceExample>> ReadPreferenceJsonl(const std::string& path);

// Writes examples as JSONL in the SFT format (prompt, response, and answer when non-empty).
absl::Status WritePromptJsonl(const std::string& path, const std::vector<PromptExample>& examples);

}  // namespace rlforge
