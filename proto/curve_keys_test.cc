#include "proto/curve_keys.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace rlforge {
namespace {

namespace fs = std::filesystem;

std::string FreshRunDir(const std::string& name) {
  std::string dir = ::testing::TempDir() + "/curve_keys_" + std::to_string(getpid()) + "_" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

int Mode(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

void WriteText(const std::string& path, const std::string& text, mode_t mode) {
  std::ofstream(path) << text;
  chmod(path.c_str(), mode);
}

TEST(CurveKeysTest, JobKeysArePrivateAndPairUp) {
  std::string run = FreshRunDir("pair");
  ASSERT_TRUE(WriteJobKeys(run).ok());
  EXPECT_EQ(Mode(run + "/keys"), 0700);
  EXPECT_EQ(Mode(JobKeyPath(run, kControllerKeyFile)), 0600);
  EXPECT_EQ(Mode(JobKeyPath(run, kActorKeyFile)), 0600);
  auto actor = LoadActorKeys(JobKeyPath(run, kActorKeyFile));
  ASSERT_TRUE(actor.ok()) << actor.status();
  auto controller = LoadControllerKeys(JobKeyPath(run, kControllerKeyFile));
  ASSERT_TRUE(controller.ok()) << controller.status();
  EXPECT_EQ(actor->controller_public, controller->controller_public);
  EXPECT_EQ(actor->actor_public, controller->actor_public);
  EXPECT_EQ(actor->controller_secret, "") << "actors never see the controller's secret";
  EXPECT_EQ(controller->actor_secret, "");
  EXPECT_EQ(actor->actor_secret.size(), 40u);
  EXPECT_NE(actor->controller_public, actor->actor_public);
  // A second job start in the same folder must not replace the keys actors already hold.
  absl::Status again = WriteJobKeys(run);
  EXPECT_FALSE(again.ok());
  EXPECT_NE(again.message().find(run + "/keys"), absl::string_view::npos) << again;
}

TEST(CurveKeysTest, EachJobGetsItsOwnKeys) {
  std::string a = FreshRunDir("a"), b = FreshRunDir("b");
  ASSERT_TRUE(WriteJobKeys(a).ok());
  ASSERT_TRUE(WriteJobKeys(b).ok());
  EXPECT_NE(LoadActorKeys(JobKeyPath(a, kActorKeyFile))->actor_secret,
            LoadActorKeys(JobKeyPath(b, kActorKeyFile))->actor_secret);
}

TEST(CurveKeysTest, GroupReadableKeyFileIsRefusedNamingIt) {
  std::string run = FreshRunDir("mode");
  ASSERT_TRUE(WriteJobKeys(run).ok());
  std::string path = JobKeyPath(run, kActorKeyFile);
  chmod(path.c_str(), 0644);
  auto k = LoadActorKeys(path);
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(k.status().message().find("key file " + path + " has mode 0644"),
            absl::string_view::npos)
      << k.status();
  EXPECT_NE(k.status().message().find("chmod 600"), absl::string_view::npos);
}

TEST(CurveKeysTest, BadFormatNamesFileAndLine) {
  std::string run = FreshRunDir("format");
  std::string path = run + "/actor.key";
  const std::string good = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7";
  WriteText(path, "# comment\n\ncontroller_public " + good + "\n", 0600);
  auto k = LoadActorKeys(path);
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.status().message().find(path + ":3: expected `name: value`"), absl::string_view::npos)
      << k.status();

  WriteText(path, "controller_public: " + good + "\nactor_public: short\n", 0600);
  k = LoadActorKeys(path);
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.status().message().find(path + ":2: actor_public: expected a 40-character Z85 key"),
            absl::string_view::npos)
      << k.status();

  WriteText(path, "controller_public: " + good + "\nactor_pubic: " + good + "\n", 0600);
  k = LoadActorKeys(path);
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.status().message().find(path + ":2: unknown key name 'actor_pubic'"),
            absl::string_view::npos)
      << k.status();

  WriteText(path, "controller_public: " + good + "\n", 0600);
  k = LoadActorKeys(path);
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.status().message().find(path + ": no 'actor_public' line"), absl::string_view::npos)
      << k.status();
}

TEST(CurveKeysTest, ControllerKeyIsNotAnActorKey) {
  std::string run = FreshRunDir("swap");
  ASSERT_TRUE(WriteJobKeys(run).ok());
  auto k = LoadActorKeys(JobKeyPath(run, kControllerKeyFile));
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.status().message().find("unknown key name 'controller_secret'"),
            absl::string_view::npos)
      << k.status();
}

TEST(CurveKeysTest, MissingKeyFileSaysSo) {
  auto k = LoadActorKeys("/nonexistent/actor.key");
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.status().message().find("key file /nonexistent/actor.key"), absl::string_view::npos);
}

}  // namespace
}  // namespace rlforge
