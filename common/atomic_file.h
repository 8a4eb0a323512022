// Whole files replaced atomically: readers see the old contents or the new, never a part.
//
// contents -> path.tmp (written, fsync'ed) -> rename(path.tmp, path) -> fsync(directory)
//
// After WriteFileAtomic returns OK the new file survives a crash of the machine. A crash
// before that leaves the old file (or none) and possibly a stale path.tmp, which the next
// write replaces. Safe from any thread for distinct paths.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace rlforge {

absl::Status WriteFileAtomic(const std::string& path, const std::string& contents);

// fsync of the directory holding `path`, so a rename into it is durable.
absl::Status SyncParentDirectory(const std::string& path);

}  // namespace rlforge
