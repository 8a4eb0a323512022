#include "controller/job_keys.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

namespace rlforge {
namespace {

namespace fs = std::filesystem;

std::string FreshRunDir(const std::string& name) {
  std::string dir = ::testing::TempDir() + "/job_keys_" + std::to_string(getpid()) + "_" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

ControllerOptions Controller(const std::string& host, const std::string& security) {
  ControllerOptions c;
  c.host = host;
  c.security = *ParseChoice<Security>(security);
  return c;
}

TEST(JobKeysTest, AutoMeansCurveExactlyOffLoopback) {
  EXPECT_FALSE(UsesCurve(Controller("127.0.0.1", "auto")));
  EXPECT_FALSE(UsesCurve(Controller("localhost", "auto")));
  EXPECT_TRUE(UsesCurve(Controller("0.0.0.0", "auto")));
  EXPECT_TRUE(UsesCurve(Controller("10.1.2.3", "auto")));
  EXPECT_TRUE(UsesCurve(Controller("127.0.0.1", "curve")));
  EXPECT_FALSE(UsesCurve(Controller("0.0.0.0", "none")));
}

TEST(JobKeysTest, LoopbackJobMakesNoKeys) {
  std::string run = FreshRunDir("loopback");
  auto s = PrepareJobSecurity(Controller("127.0.0.1", "auto"), run);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(s->controller_keys.has_value());
  EXPECT_EQ(s->actor_key_path, "");
  EXPECT_FALSE(fs::exists(run + "/keys"));
}

// `rlforge run --resume` reaches PrepareJobSecurity again in the same folder: the actors' keys
// must stay valid.
TEST(JobKeysTest, ResumedRunReusesItsKeys) {
  std::string run = FreshRunDir("resume");
  auto first = PrepareJobSecurity(Controller("0.0.0.0", "auto"), run);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(first->controller_keys.has_value());
  EXPECT_EQ(first->actor_key_path, fs::absolute(run).string() + "/keys/actor.key");
  auto again = PrepareJobSecurity(Controller("0.0.0.0", "auto"), run);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->controller_keys->controller_secret, first->controller_keys->controller_secret);
  EXPECT_EQ(again->controller_keys->actor_public, first->controller_keys->actor_public);
}

TEST(JobKeysTest, LeakedKeyFileStopsTheJob) {
  std::string run = FreshRunDir("leaked");
  ASSERT_TRUE(PrepareJobSecurity(Controller("0.0.0.0", "auto"), run).ok());
  fs::permissions(run + "/keys/actor.key", fs::perms::group_read, fs::perm_options::add);
  auto s = PrepareJobSecurity(Controller("0.0.0.0", "auto"), run);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("actor.key has mode 0640"), absl::string_view::npos)
      << s.status();
}

// controller.keys (a mounted Kubernetes Secret): those keys, and no keys folder in the run.
TEST(JobKeysTest, GivenKeysAreUsedInsteadOfNewOnes) {
  std::string made = FreshRunDir("given_source");
  ASSERT_TRUE(WriteJobKeys(made).ok());
  auto expected = LoadControllerKeys(made + "/keys/controller.key");
  ASSERT_TRUE(expected.ok()) << expected.status();
  ControllerOptions c = Controller("0.0.0.0", "auto");
  c.keys = made + "/keys";
  std::string run = FreshRunDir("given");
  auto s = PrepareJobSecurity(c, run);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->controller_keys->controller_secret, expected->controller_secret);
  EXPECT_EQ(s->actor_key_path, fs::absolute(made).string() + "/keys/actor.key");
  EXPECT_FALSE(fs::exists(run + "/keys"));
  c.keys = run + "/nowhere";
  auto missing = PrepareJobSecurity(c, run);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("controller.keys"), absl::string_view::npos)
      << missing.status();
}

TEST(JobKeysTest, ExternalSimServersOffLoopbackAreNamedAsPlaintext) {
  JobConfig c;
  c.sim.addresses = {"tcp://127.0.0.1:5555", "ipc:///tmp/x.sock", "tcp://10.0.0.7:5555",
                     "tcp://node2:6000"};
  EXPECT_EQ(WarnPlaintextSockets(c), 2);
}

}  // namespace
}  // namespace rlforge
