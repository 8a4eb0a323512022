#include "cli/load_job.h"

#include <cstdio>

namespace rlforge {

bool LoadOrReport(const std::string& path, const std::vector<std::string>& overrides,
                  LoadedJob* out, const std::vector<JobCheck>& checks) {
  *out = LoadJobFile(path, overrides, checks);
  std::fprintf(stderr, "%s", config::FormatWarnings(out->warnings).c_str());
  if (out->ok()) return true;
  std::fprintf(stderr, "%s", config::FormatErrors(out->errors).c_str());
  std::fprintf(stderr, "%zu problem(s) in %s; see docs/config.md for every key.\n",
               out->errors.size(), path.c_str());
  return false;
}

}  // namespace rlforge
