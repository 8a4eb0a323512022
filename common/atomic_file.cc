#include "common/atomic_file.h"

#include "common/file_system.h"

namespace rlforge {

absl::Status WriteFileAtomic(const std::string& path, const std::string& contents) {
  return WriteFileAtomic(FileSystem::Default(), path, contents);
}

absl::Status SyncParentDirectory(const std::string& path) {
  return SyncParentDirectory(FileSystem::Default(), path);
}

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  return FileSystem::Default().ReadFile(path);
}

}  // namespace rlforge
