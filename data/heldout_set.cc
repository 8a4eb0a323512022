#include "data/heldout_set.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "data/arith_task.h"

namespace rlforge {

absl::StatusOr<std::vector<PromptExample>> HeldoutExamples(const DataOptions& data, uint64_t seed,
                                                           int64_t count, JsonlFormat format) {
  const size_t n = static_cast<size_t>(std::max<int64_t>(count, 0));
  if (data.source == DataSource::kJsonl) {
    ASSIGN_OR_RETURN(std::vector<PromptExample> examples,
                     ReadPromptJsonl(data.heldout_path, format));
    if (examples.size() > n) examples.resize(n);
    return examples;
  }
  ASSIGN_OR_RETURN(ArithmeticTask task, ArithmeticTaskFor(data));
  return task.Examples(seed, Split::kHeldout, 0, n);
}

std::string HeldoutSource(const DataOptions& data, uint64_t seed) {
  if (data.source == DataSource::kJsonl) return data.heldout_path;
  return absl::StrCat("the arithmetic task's held-out split (job.seed ", seed, ")");
}

}  // namespace rlforge
