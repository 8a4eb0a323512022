// LmGroup: n generated samples of one prompt, as they travel between the
// controller, LM rollout workers and the GRPO trainer.
//
// groups <-> tensor frames "request_ids" [G], "prompt_lengths" [G], "prompt_tokens" (int32,
// concatenated) and, with samples, "sample_lengths" [G*n], "tokens" (int32), "logprobs"
// (f32 per token), "versions" (int64 per token), "stopped" (int64 [G*n]).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/tensor_frame.h"

namespace rlforge {

struct LmSample {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;    // per token, under the policy that sampled it
  std::vector<int64_t> versions;  // per token, that policy's version
  bool stopped = false;           // ended by a stop token or string (else by length)
};

struct LmGroup {
  int64_t request_id = 0;
  std::vector<int32_t> prompt;
  std::vector<LmSample> samples;
};

// The sampling seed of group `request_id` of a generation request seeded with `seed`: a
// function of the two alone, so a group's samples are the same whichever engine of a fleet
// generates it and wherever it sits in that engine's share.
inline uint64_t RequestSeed(uint64_t seed, int64_t request_id) {
  return seed ^ (static_cast<uint64_t>(request_id) * 0x9E3779B97F4A7C15ull);
}

// Prompts only (a generation request) when `with_samples` is false.
std::vector<TensorFrame> GroupsToFrames(const std::vector<LmGroup>& groups, bool with_samples);
// Reads frames written by GroupsToFrames; `n` samples per group when with_samples. Every size
// is checked: a malformed batch is an error naming the tensor, never a crash.
absl::StatusOr<std::vector<LmGroup>> GroupsFromFrames(const std::vector<TensorFrame>& frames,
                                                      bool with_samples, int64_t n);
// The frame named `name`, or nullptr.
const TensorFrame* FindFrame(const std::vector<TensorFrame>& frames, const std::string& name);

}  // namespace rlforge
