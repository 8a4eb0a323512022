// Whole files: read in one call, and replaced atomically (readers see the old contents or the
// new, never a part).
//
// contents -> path.tmp (written, fsync'ed) -> rename(path.tmp, path) -> fsync(directory)
//
// After WriteFileAtomic returns OK the new file survives a crash of the machine. A crash
// before that leaves the old file (or none) and possibly a stale path.tmp, which the next
// write replaces. Safe from any thread for distinct paths.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace rlforge {

absl::Status WriteFileAtomic(const std::string& path, const std::string& contents);

// The bytes of the file at `path`; an error names the path.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// fsync of the directory holding `path`, so a rename into it is durable.
absl::Status SyncParentDirectory(const std::string& path);

}  // namespace rlforge
