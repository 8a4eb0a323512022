#include "common/atomic_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace rlforge {
namespace {

TEST(AtomicFileTest, ReplacesContentsAndLeavesNoTemporary) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("rlforge_atomic_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "f.json").string();
  ASSERT_TRUE(WriteFileAtomic(path, "first, longer contents").ok());
  ASSERT_TRUE(WriteFileAtomic(path, "second").ok());
  EXPECT_EQ(*ReadFileToString(path), "second");
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  std::filesystem::remove_all(dir);
}

TEST(AtomicFileTest, ReadingAMissingFileNamesIt) {
  const auto s = ReadFileToString("/nonexistent_rlforge_dir/x.json");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(std::string(s.status().message()),
            "/nonexistent_rlforge_dir/x.json: cannot open: No such file or directory");
  EXPECT_TRUE(absl::IsNotFound(s.status()));
}

TEST(AtomicFileTest, MissingDirectoryIsAnErrorNamingThePath) {
  const absl::Status s = WriteFileAtomic("/nonexistent_rlforge_dir/x.json", "x");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("/nonexistent_rlforge_dir/x.json.tmp"), std::string::npos)
      << s;
}

}  // namespace
}  // namespace rlforge
