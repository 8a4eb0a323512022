#include "common/file_system.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/fault_injection_file_system.h"

namespace rlforge {
namespace {

using Fault = FaultInjectionFileSystem;

std::string FreshDir(const std::string& name) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("rlforge_fs_" + std::to_string(::getpid())) / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

std::string Read(const std::string& path) {
  auto s = FileSystem::Default().ReadFile(path);
  return s.ok() ? *s : absl::StrCat("<", s.status().message(), ">");
}

TEST(FileSystemTest, PosixOperationsDoWhatTheySay) {
  FileSystem& fs = FileSystem::Default();
  const std::string dir = FreshDir("posix");
  ASSERT_TRUE(fs.CreateDirectories(dir + "/a/b").ok());
  EXPECT_FALSE(*fs.CreateDirectory(dir + "/a"));  // already there
  auto f = fs.NewWritableFile(dir + "/a/f");
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_TRUE((*f)->Append("hello").ok());
  ASSERT_TRUE((*f)->WriteAt(7, "!").ok());  // a hole of zeros
  ASSERT_TRUE((*f)->Sync().ok());
  ASSERT_TRUE((*f)->Close().ok());
  EXPECT_EQ(Read(dir + "/a/f"), std::string("hello\0\0!", 8));
  auto g = fs.NewAppendableFile(dir + "/a/f");
  ASSERT_TRUE(g.ok() && (*g)->Append("x").ok() && (*g)->Close().ok());
  EXPECT_EQ(fs.Stat(dir + "/a/f")->size, 9u);
  EXPECT_EQ(*fs.ListDirectory(dir + "/a"), (std::vector<std::string>{"b", "f"}));
  ASSERT_TRUE(fs.Rename(dir + "/a/f", dir + "/a/b/g").ok());
  EXPECT_FALSE(fs.Exists(dir + "/a/f"));
  ASSERT_TRUE(fs.RemoveTree(dir + "/a").ok());
  EXPECT_FALSE(fs.Exists(dir + "/a"));
  EXPECT_TRUE(fs.RemoveTree(dir + "/a").ok());  // missing is fine
}

TEST(FileSystemTest, ErrorsNameThePathTheOperationAndTheErrno) {
  const auto s = FileSystem::Default().ReadFile("/nonexistent_rlforge_dir/x");
  EXPECT_TRUE(absl::IsNotFound(s.status()));
  EXPECT_EQ(s.status().message(),
            "/nonexistent_rlforge_dir/x: cannot open: No such file or directory");
  EXPECT_EQ(ParentDirectory("a/b/c"), "a/b");
  EXPECT_EQ(ParentDirectory("/c"), "/");
  EXPECT_EQ(ParentDirectory("c"), ".");
}

TEST(FaultInjectionFileSystemTest, AFailedOperationReadsAsTheRealErrorAndChangesNothing) {
  const std::string dir = FreshDir("fail");
  Fault fs(FileSystem::Default());
  fs.FailAt(2, ENOSPC);  // 1: create, 2: append
  auto f = fs.NewWritableFile(dir + "/f");
  ASSERT_TRUE(f.ok());
  const absl::Status s = (*f)->Append("data");
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_EQ(s.message(), dir + "/f: cannot write: No space left on device");
  EXPECT_TRUE(fs.fired());
  EXPECT_TRUE((*f)->Append("ok").ok());  // later operations work
  ASSERT_TRUE((*f)->Close().ok());
  EXPECT_EQ(Read(dir + "/f"), "ok");
  ASSERT_EQ(fs.ops().size(), 4u);
  EXPECT_EQ(fs.ops()[1].op, Fault::Op::kAppend);
  EXPECT_EQ(fs.ops()[1].bytes, 4u);
  fs.Reset();
  fs.FailAt(1, EIO);
  const absl::Status r = fs.Rename(dir + "/f", dir + "/g");
  EXPECT_EQ(r.message(), dir + "/f: cannot rename to " + dir + "/g: Input/output error");
  EXPECT_EQ(Read(dir + "/f"), "ok");
}

TEST(FaultInjectionFileSystemTest, ACrashKeepsTheFirstBytesOfTheWriteAndStopsEverything) {
  const std::string dir = FreshDir("crash");
  Fault fs(FileSystem::Default());
  fs.CrashAt(3, 2);  // 1: create, 2: append "abc", 3: append "defg" cut after "de"
  auto f = fs.NewWritableFile(dir + "/f");
  ASSERT_TRUE(f.ok() && (*f)->Append("abc").ok());
  const absl::Status s = (*f)->Append("defg");
  EXPECT_TRUE(absl::IsAborted(s));
  EXPECT_EQ(s.message(), dir + "/f: simulated crash during append");
  EXPECT_TRUE(fs.crashed());
  EXPECT_FALSE((*f)->Sync().ok());
  EXPECT_FALSE(fs.Stat(dir + "/f").ok());
  EXPECT_EQ(Read(dir + "/f"), "abcde");  // the page cache outlives the process
}

TEST(FaultInjectionFileSystemTest, AMachineCrashLosesWhatWasNotSynced) {
  const std::string dir = FreshDir("machine");
  Fault fs(FileSystem::Default());
  auto synced = fs.NewWritableFile(dir + "/synced");
  ASSERT_TRUE(synced.ok() && (*synced)->Append("kept").ok() && (*synced)->Sync().ok());
  ASSERT_TRUE((*synced)->Append(" lost").ok());
  auto unsynced = fs.NewWritableFile(dir + "/unsynced");
  ASSERT_TRUE(unsynced.ok() && (*unsynced)->Append("lost").ok());
  fs.CrashAt(static_cast<int64_t>(fs.ops().size()) + 1, 0, Fault::Crash::kMachine);
  EXPECT_FALSE(fs.SyncDirectory(dir).ok());
  EXPECT_EQ(Read(dir + "/synced"), "kept");
  EXPECT_EQ(Read(dir + "/unsynced"), "");
}

// WriteFileAtomic at every failure point, every errno and every crash: the file holds the old
// contents or the new, never a part, and an error is returned whenever it is not the new.
TEST(FaultInjectionFileSystemTest, AnAtomicWriteLeavesTheOldFileOrTheNewAtEveryFailurePoint) {
  const std::string dir = FreshDir("atomic");
  const std::string path = dir + "/f.json";
  const std::string old_text = "old contents", new_text = "the new contents";
  Fault fs(FileSystem::Default());
  ASSERT_TRUE(WriteFileAtomic(fs, path, new_text).ok());
  const std::vector<Fault::Record> ops = fs.ops();
  int injected = 0;
  for (size_t n = 1; n <= ops.size(); ++n) {
    for (int variant = 0; variant < 4; ++variant) {
      ASSERT_TRUE(WriteFileAtomic(FileSystem::Default(), path, old_text).ok());
      fs.Reset();
      if (variant < 2) fs.FailAt(n, variant == 0 ? ENOSPC : EIO);
      if (variant >= 2) {
        fs.CrashAt(n, ops[n - 1].bytes / 2,
                   variant == 2 ? Fault::Crash::kProcess : Fault::Crash::kMachine);
      }
      const absl::Status s = WriteFileAtomic(fs, path, new_text);
      ASSERT_TRUE(fs.fired());
      ++injected;
      const std::string now = Read(path);
      EXPECT_TRUE(now == old_text || now == new_text) << "op " << n << ": " << now;
      // Only the last step (the directory fsync) may fail after the new file is in place.
      if (now != new_text) {
        EXPECT_FALSE(s.ok()) << "op " << n;
      }
      if (!s.ok()) {
        EXPECT_NE(s.message().find(dir), std::string::npos) << s;
      }
    }
  }
  EXPECT_EQ(injected, 4 * static_cast<int>(ops.size()));
}

}  // namespace
}  // namespace rlforge
