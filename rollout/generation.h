// What the LLM engine takes and gives back: a request for n samples of one prompt, and the
// finished group of its samples. No libtorch here: the scheduler (rollout/scheduler.h) and the
// engine (rollout/llm_engine.h) both speak these.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rollout/sampler.h"

namespace rlforge {

struct GenerationRequest {
  uint64_t id = 0;
  std::vector<int32_t> prompt;
  int64_t n = 1;
  SamplingParams params;
};

struct GeneratedSample {
  int64_t index = 0;              // 0..n-1 within the group
  std::vector<int32_t> tokens;    // generated tokens (the stop token included)
  std::vector<float> logprobs;    // one per token, unmodified policy
  std::vector<int64_t> versions;  // policy version that sampled each token
  std::string finish_reason;      // "stop" (stop token or string) or "length"
};

struct FinishedGroup {
  uint64_t request_id = 0;
  std::vector<int32_t> prompt;
  std::vector<GeneratedSample> samples;  // ordered by index
};

}  // namespace rlforge
