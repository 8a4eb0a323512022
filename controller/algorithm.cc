#include "controller/algorithm.h"

#include "absl/strings/str_cat.h"
#include "controller/dpo_algorithm.h"
#include "controller/echo_algorithm.h"
#include "controller/grpo_algorithm.h"
#include "controller/ppo_algorithm.h"
#include "controller/sft_algorithm.h"

namespace rlforge {

absl::StatusOr<std::unique_ptr<Algorithm>> CreateAlgorithm(const JobConfig& config) {
  if (config.job.algorithm == "echo") return std::make_unique<EchoAlgorithm>(config);
  if (config.job.algorithm == "ppo") return std::make_unique<PpoAlgorithm>(config);
  if (config.job.algorithm == "sft") return std::make_unique<SftAlgorithm>(config);
  if (config.job.algorithm == "grpo" || config.job.algorithm == "lm_ppo") {
    return GrpoAlgorithm::Create(config);
  }
  if (config.job.algorithm == "dpo") return DpoAlgorithm::Create(config);
  return absl::InvalidArgumentError(
      absl::StrCat("job.algorithm '", config.job.algorithm, "' has no implementation"));
}

}  // namespace rlforge
