#include "config/dashboard_config.h"

#include <gtest/gtest.h>

namespace rlforge {
namespace {

TEST(DashboardConfigTest, LoopbackNeedsNoTokenAnythingElseDoes) {
  EXPECT_TRUE(IsLoopbackHost("127.0.0.1"));
  EXPECT_TRUE(IsLoopbackHost("127.0.1.1"));
  EXPECT_TRUE(IsLoopbackHost("localhost"));
  EXPECT_TRUE(IsLoopbackHost("::1"));
  EXPECT_FALSE(IsLoopbackHost("0.0.0.0"));
  EXPECT_FALSE(IsLoopbackHost("10.0.0.5"));

  DashboardOptions o;
  auto none = ResolveDashboardToken(o, nullptr);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, "");
  o.host = "0.0.0.0";
  auto refused = ResolveDashboardToken(o, nullptr);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("dashboard.host: '0.0.0.0'"), std::string::npos);
  auto from_env = ResolveDashboardToken(o, "env-token");
  ASSERT_TRUE(from_env.ok());
  EXPECT_EQ(*from_env, "env-token");
  o.token = "file-token";
  EXPECT_EQ(*ResolveDashboardToken(o, "env-token"), "file-token") << "the job file wins";
  o.token.clear();
  o.enabled = false;
  EXPECT_TRUE(ResolveDashboardToken(o, nullptr).ok()) << "no server, no token needed";
}

TEST(DashboardConfigTest, SectionLoadsAndValidates) {
  LoadedJob job = LoadJobText(
      "job: {algorithm: echo}\ndashboard: {port: 8080, linger_s: 5, token: 'a b'}\n", "t.yaml");
  ASSERT_EQ(job.errors.size(), 1u);
  EXPECT_EQ(job.errors[0].key, "dashboard.token");
  EXPECT_EQ(job.config.dashboard.port, 8080);
  LoadedJob bad = LoadJobText("job: {algorithm: echo}\ndashboard: {port: 70000}\n", "t.yaml");
  ASSERT_EQ(bad.errors.size(), 1u);
  EXPECT_EQ(bad.errors[0].key, "dashboard.port");
}

}  // namespace
}  // namespace rlforge
