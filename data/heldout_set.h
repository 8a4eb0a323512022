// The held-out set of a language-model job: what its evaluation scores, and what `rlforge eval
// --job` scores, from one definition so the two agree.
//
// data: section + job.seed + count -> data.heldout_path's first `count` lines (source jsonl)
//   or examples 0 .. count-1 of the arithmetic task's held-out split for the seed
//
// Thread-safe (no state).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "config/lm_options.h"
#include "data/jsonl_dataset.h"
#include "data/prompt_example.h"

namespace rlforge {

// At most `count` held-out examples (fewer when the file is shorter). `format` is how the
// file's lines read (kSft: prompt and response; kRl: prompt and answer). Errors name the file
// and line, or the data.* option that makes no task.
absl::StatusOr<std::vector<PromptExample>> HeldoutExamples(const DataOptions& data, uint64_t seed,
                                                           int64_t count, JsonlFormat format);

// Where those examples come from, for people: "data/heldout.jsonl", or "the arithmetic task's
// held-out split (job.seed 1)".
std::string HeldoutSource(const DataOptions& data, uint64_t seed);

}  // namespace rlforge
