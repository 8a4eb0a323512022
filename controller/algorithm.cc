#include "controller/algorithm.h"

#include "absl/strings/str_cat.h"
#include "controller/dpo_algorithm.h"
#include "controller/echo_algorithm.h"
#include "controller/lm_loop.h"
#include "controller/lm_rl_algorithm.h"
#include "controller/ppo_algorithm.h"
#include "controller/sft_algorithm.h"

namespace rlforge {

absl::StatusOr<std::unique_ptr<Algorithm>> CreateAlgorithm(const JobConfig& config) {
  if (config.job.algorithm == nullptr) {
    return absl::InvalidArgumentError("job.algorithm is not set");
  }
  // Every family has a case and there is no default: a new family fails to compile here.
  switch (config.job.algorithm->family) {
    case AlgorithmFamily::kEcho:
      return std::make_unique<EchoAlgorithm>(config);
    case AlgorithmFamily::kControlPpo:
      return std::make_unique<PpoAlgorithm>(config);
    case AlgorithmFamily::kSft:
      return std::make_unique<SftAlgorithm>(config);
    case AlgorithmFamily::kLmRl:
      return LmRlAlgorithm::Create(config);
    case AlgorithmFamily::kDpo:
      return DpoAlgorithm::Create(config);
  }
  return absl::InternalError(
      absl::StrCat("job.algorithm ", config.job.algorithm->name, " has an unknown family"));
}

std::vector<RoleRequirement> AlgorithmRoles(const JobConfig& config) {
  switch (config.job.algorithm->family) {
    case AlgorithmFamily::kEcho:
      return EchoAlgorithm(config).Roles();
    case AlgorithmFamily::kControlPpo:
      return PpoAlgorithm(config).Roles();
    case AlgorithmFamily::kSft:
      return SftAlgorithm(config).Roles();
    case AlgorithmFamily::kLmRl:
    case AlgorithmFamily::kDpo:
      return LmRoles(config);
  }
  return {};
}

absl::StatusOr<std::string> LeadTrainer(const Controller& controller) {
  std::vector<std::string> ids = controller.actors().IdsOfRole(kTrainerRole);
  if (ids.empty()) return absl::FailedPreconditionError("the job has no trainer actor");
  return ids.front();
}

}  // namespace rlforge
