// CheckpointSampler: a checkpoint's rollout engine in this process, for `rlforge generate`
// and `rlforge eval`.
//
// prompts -> TaskText::Encode (the job's template, system prompt, bos) -> the job's rollout
//   worker role (from the role registry: the same engine settings, stop token and per-request
//   seeds) -> groups in prompt order -> TaskText::Response (the text rewards and evaluation read)
//
// Built from a JobConfig so that every setting a job's held-out evaluation uses (model.path,
// data.prompt_template / system_prompt, engine:, trainer.threads) means the same here. Not
// thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "actors/role.h"
#include "config/job_config.h"
#include "controller/lm_loop.h"
#include "proto/lm_groups.h"

namespace rlforge {

// The new-token budget of a request whose longest prompt is `longest_prompt` tokens (prompt
// number `which`, from 1) in a model of `context` positions (max_position_embeddings; the
// engine refuses prompt + max tokens beyond it). `requested` when it fits. A default
// (`from_flag` false: --max-tokens not given) that does not fit is clipped to context -
// longest_prompt, and `*note` says so; a --max-tokens given that does not fit is an error
// naming the flag and both numbers, as is a prompt that leaves no room at all. `context` 0:
// no limit known.
absl::StatusOr<int64_t> FitMaxTokens(int64_t requested, bool from_flag, int64_t longest_prompt,
                                     size_t which, int64_t context, std::string* note);

class CheckpointSampler {
 public:
  // Loads config.model.path's tokenizer, template and model. An empty
  // data.prompt_template is the checkpoint's chat template when it has one, else none.
  // Errors name the directory, file or template.
  static absl::StatusOr<std::unique_ptr<CheckpointSampler>> Open(const JobConfig& config);

  // p.n samples of each prompt, groups in the order of `prompts` (request id = index).
  absl::StatusOr<std::vector<LmGroup>> Sample(const std::vector<std::string>& prompts,
                                              const SamplingParams& p);
  const TaskText& text() const { return text_; }

  // The new-token budget for `prompts` in this checkpoint's context (FitMaxTokens, with the
  // longest prompt as the engine sees it and config.json's max_position_embeddings).
  absl::StatusOr<int64_t> MaxTokensFor(const std::vector<std::string>& prompts, int64_t requested,
                                       bool from_flag, std::string* note) const;

 private:
  CheckpointSampler() = default;
  JobConfig config_;  // what the engine reads; before engine_, which keeps a reference
  TaskText text_;
  int64_t context_ = 0;  // config.json's max_position_embeddings
  std::unique_ptr<Role> engine_;
};

}  // namespace rlforge
