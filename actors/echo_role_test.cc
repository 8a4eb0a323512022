#include "actors/echo_role.h"

#include <gtest/gtest.h>

namespace rlforge {
namespace {

TEST(EchoRoleTest, ReturnsTensorsWithChecksums) {
  EchoRole role;
  proto::WorkRequest req;
  req.mutable_echo();
  std::vector<TensorFrame> in;
  in.push_back(TensorFrame::FromVector<float>("a", {1, 2, 3}));
  uint64_t sum = Fnv1a64(in[0].data(), in[0].nbytes());
  auto reply = role.Handle(req, std::move(in));
  ASSERT_TRUE(reply.ok());
  ASSERT_EQ(reply->tensors.size(), 1u);
  EXPECT_EQ(reply->tensors[0].ToVector<float>(), (std::vector<float>{1, 2, 3}));
  ASSERT_EQ(reply->result.echo().checksums_size(), 1);
  EXPECT_EQ(reply->result.echo().checksums(0), sum);
}

TEST(EchoRoleTest, RejectsOtherTasks) {
  EchoRole role;
  EXPECT_FALSE(role.Handle(proto::WorkRequest{}, {}).ok());
}

TEST(RoleRegistryTest, UnknownRoleListsKnownOnes) {
  auto r = CreateRole("rolout", JobConfig{}, proto::Assignment{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("echo"), std::string::npos);
}

TEST(RoleRegistryTest, RewardRoleIsRegistered) {
  LoadedJob j = LoadJobText(
      "job: {algorithm: echo}\nreward:\n  rewards:\n    - {name: c, kind: exact_answer}\n", "t");
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
