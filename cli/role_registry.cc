#include "cli/role_registry.h"

#include "absl/strings/str_cat.h"
#include "actors/echo_role.h"
#include "common/role_names.h"
#include "common/strings.h"
#include "reward/reward_role.h"
#include "rollout/control_rollout_role.h"
#include "rollout/lm_rollout_role.h"
#include "trainer/dpo_trainer_role.h"
#include "trainer/lm_rl_trainer_role.h"
#include "trainer/ppo_trainer_role.h"
#include "trainer/sft_trainer_role.h"

namespace rlforge {

namespace {

struct RoleEntry {
  const char* name;
  absl::StatusOr<std::unique_ptr<Role>> (*create)(const JobConfig&, const proto::Assignment&,
                                                  const SetupProgress&);
};

absl::StatusOr<std::unique_ptr<Role>> MakeEcho(const JobConfig&, const proto::Assignment&,
                                               const SetupProgress&) {
  return std::make_unique<EchoRole>();
}

absl::Status NoRole(const JobConfig& c, const char* role) {
  return absl::InvalidArgumentError(
      absl::StrCat("job.algorithm ", c.job.algorithm->name, " has no ", role, " role"));
}

absl::Status NoAlgorithm(const char* role) {
  return absl::InvalidArgumentError(
      absl::StrCat("the ", role, " role needs the job's job.algorithm, and the config has none"));
}

// Roles whose implementation depends on the algorithm dispatch on its family; a family
// without a case here fails to compile (-Werror=switch).
absl::StatusOr<std::unique_ptr<Role>> MakeRollout(const JobConfig& c, const proto::Assignment& a,
                                                  const SetupProgress& progress) {
  if (c.job.algorithm == nullptr) return NoAlgorithm(kRolloutRole);
  switch (c.job.algorithm->family) {
    case AlgorithmFamily::kControlPpo:
      return std::make_unique<ControlRolloutRole>(c, a);
    case AlgorithmFamily::kLmRl:
    case AlgorithmFamily::kDpo:
      return LmRolloutRole::Create(c, a, progress);
    case AlgorithmFamily::kEcho:
    case AlgorithmFamily::kSft:
      break;
  }
  return NoRole(c, kRolloutRole);
}

absl::StatusOr<std::unique_ptr<Role>> MakeTrainer(const JobConfig& c, const proto::Assignment& a,
                                                  const SetupProgress& progress) {
  if (c.job.algorithm == nullptr) return NoAlgorithm(kTrainerRole);
  switch (c.job.algorithm->family) {
    case AlgorithmFamily::kControlPpo:
      return std::make_unique<PpoTrainerRole>(c, a);
    case AlgorithmFamily::kSft:
      return std::make_unique<SftTrainerRole>(c, a);
    case AlgorithmFamily::kLmRl:
      return LmRlTrainerRole::Create(c, a, progress);
    case AlgorithmFamily::kDpo:
      return DpoTrainerRole::Create(c, a, progress);
    case AlgorithmFamily::kEcho:
      break;
  }
  return NoRole(c, kTrainerRole);
}

absl::StatusOr<std::unique_ptr<Role>> MakeReward(const JobConfig& c, const proto::Assignment& a,
                                                 const SetupProgress&) {
  return reward::RewardRole::Create(c, a);
}

// Every role an actor process can take. New roles add one line here.
constexpr RoleEntry kRoles[] = {
    {kEchoRole, &MakeEcho},
    {kRolloutRole, &MakeRollout},
    {kTrainerRole, &MakeTrainer},
    {kRewardRole, &MakeReward},
};

}  // namespace

std::vector<std::string> KnownRoles() {
  std::vector<std::string> names;
  for (const auto& r : kRoles) names.push_back(r.name);
  return names;
}

absl::StatusOr<std::unique_ptr<Role>> CreateRole(const std::string& role, const JobConfig& config,
                                                 const proto::Assignment& assignment,
                                                 const SetupProgress& progress) {
  for (const auto& r : kRoles) {
    if (role == r.name) return r.create(config, assignment, progress);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown role '", role, "'; known roles: ", JoinOr(KnownRoles())));
}

}  // namespace rlforge
