#include "absl/strings/str_cat.h"
#include "actors/echo_role.h"
#include "cli/role_registry.h"
#include "common/strings.h"
#include "reward/reward_role.h"
#include "rollout/control_rollout_role.h"
#include "rollout/lm_rollout_role.h"
#include "trainer/dpo_trainer_role.h"
#include "trainer/grpo_trainer_role.h"
#include "trainer/ppo_trainer_role.h"
#include "trainer/sft_trainer_role.h"

namespace rlforge {

namespace {

struct RoleEntry {
  const char* name;
  absl::StatusOr<std::unique_ptr<Role>> (*create)(const JobConfig&, const proto::Assignment&);
};

absl::StatusOr<std::unique_ptr<Role>> MakeEcho(const JobConfig&, const proto::Assignment&) {
  return std::make_unique<EchoRole>();
}

// Roles whose implementation depends on the algorithm dispatch on it.
absl::StatusOr<std::unique_ptr<Role>> MakeRollout(const JobConfig& c, const proto::Assignment& a) {
  if (c.job.algorithm == "ppo") return std::make_unique<ControlRolloutRole>(c, a);
  if (c.job.algorithm == "grpo" || c.job.algorithm == "lm_ppo" || c.job.algorithm == "dpo") {
    return LmRolloutRole::Create(c, a);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("job.algorithm ", c.job.algorithm, " has no rollout role"));
}

absl::StatusOr<std::unique_ptr<Role>> MakeTrainer(const JobConfig& c, const proto::Assignment& a) {
  if (c.job.algorithm == "ppo") return std::make_unique<PpoTrainerRole>(c, a);
  if (c.job.algorithm == "sft") return std::make_unique<SftTrainerRole>(c, a);
  if (c.job.algorithm == "grpo" || c.job.algorithm == "lm_ppo") {
    return GrpoTrainerRole::Create(c, a);
  }
  if (c.job.algorithm == "dpo") return DpoTrainerRole::Create(c, a);
  return absl::InvalidArgumentError(
      absl::StrCat("job.algorithm ", c.job.algorithm, " has no trainer role"));
}

// Every role an actor process can take. New roles add one line here.
constexpr RoleEntry kRoles[] = {
    {"echo", &MakeEcho},
    {"rollout", &MakeRollout},
    {"trainer", &MakeTrainer},
    {"reward", &reward::RewardRole::Create},
};

}  // namespace

std::vector<std::string> KnownRoles() {
  std::vector<std::string> names;
  for (const auto& r : kRoles) names.push_back(r.name);
  return names;
}

absl::StatusOr<std::unique_ptr<Role>> CreateRole(const std::string& role, const JobConfig& config,
                                                 const proto::Assignment& assignment) {
  for (const auto& r : kRoles) {
    if (role == r.name) return r.create(config, assignment);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown role '", role, "'; known roles: ", JoinOr(KnownRoles())));
}

}  // namespace rlforge
