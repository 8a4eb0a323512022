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

 private:
  CheckpointSampler() = default;
  JobConfig config_;  // what the engine reads; before engine_, which keeps a reference
  TaskText text_;
  std::unique_ptr<Role> engine_;
};

}  // namespace rlforge
