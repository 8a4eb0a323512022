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

}  // namespace
}  // namespace rlforge
