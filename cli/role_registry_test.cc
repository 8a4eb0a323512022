#include "cli/role_registry.h"

#include <gtest/gtest.h>

#include "config/job_config.h"

namespace rlforge {
namespace {

TEST(RoleRegistryTest, UnknownRoleListsKnownOnes) {
  auto r = CreateRole("rolout", JobConfig{}, proto::Assignment{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("echo"), std::string::npos);
}

TEST(RoleRegistryTest, RewardRoleIsRegistered) {
  LoadedJob j = LoadJobText(
      "job: {algorithm: grpo}\nreward:\n  rewards:\n    - {name: c, kind: exact_answer}\n", "t");
  ASSERT_TRUE(j.ok()) << config::FormatErrors(j.errors);
  auto role = CreateRole("reward", j.config, proto::Assignment{});
  ASSERT_TRUE(role.ok()) << role.status();
  proto::WorkRequest req;
  auto* s = req.mutable_score()->add_samples();
  s->set_response("42");
  s->set_answer("42");
  auto reply = (*role)->Handle(req, {});
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->result.score().total(0), 1.0);
}

}  // namespace
}  // namespace rlforge
