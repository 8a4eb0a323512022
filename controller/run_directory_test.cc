#include "controller/run_directory.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace rlforge {
namespace {

namespace fs = std::filesystem;

TEST(RunDirectoryTest, ExistingNameGetsASuffix) {
  fs::path root = fs::temp_directory_path() / ("rlforge_rundir_" + std::to_string(getpid()));
  fs::remove_all(root);
  auto a = RunDirectory::Create(root.string(), "job");
  auto b = RunDirectory::Create(root.string(), "job");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->name(), "job");
  EXPECT_EQ(b->name(), "job-2");
  EXPECT_TRUE(fs::is_directory(fs::path(a->path()) / "logs"));
  EXPECT_EQ(a->LogPath("rollout-1"), (fs::path(a->path()) / "logs" / "rollout-1.log").string());
  fs::remove_all(root);
}

TEST(RunDirectoryTest, WriteFileReplacesWholeAndMetricsAppend) {
  fs::path root = fs::temp_directory_path() / ("rlforge_rundir2_" + std::to_string(getpid()));
  fs::remove_all(root);
  auto d = RunDirectory::Create(root.string(), "j");
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE(d->WriteFile("x.txt", "one").ok());
  ASSERT_TRUE(d->WriteFile("x.txt", "two").ok());
  std::ifstream in(fs::path(d->path()) / "x.txt");
  std::string s;
  in >> s;
  EXPECT_EQ(s, "two");
  EXPECT_FALSE(fs::exists(fs::path(d->path()) / "x.txt.tmp"));
  auto m = MetricsLog::Open(d->path() + "/metrics.jsonl");
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(m->Append({{"step", 1}}).ok());
  ASSERT_TRUE(m->Append({{"step", 2}}).ok());
  std::ifstream mi(fs::path(d->path()) / "metrics.jsonl");
  std::string l1, l2;
  std::getline(mi, l1);
  std::getline(mi, l2);
  EXPECT_EQ(l1, "{\"step\":1}");
  EXPECT_EQ(l2, "{\"step\":2}");
  fs::remove_all(root);
}

TEST(RunDirectoryTest, UnwritableRootIsAnError) {
  auto d = RunDirectory::Create("/proc/rlforge_cannot", "j");
  EXPECT_FALSE(d.ok());
}

}  // namespace
}  // namespace rlforge
