#include "common/host_address.h"

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"

namespace rlforge {

bool IsLoopbackHost(const std::string& host) {
  std::string h = absl::AsciiStrToLower(host);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (h == "localhost" || h == "::1" || h == "0:0:0:0:0:0:0:1") return true;
  std::vector<std::string> parts = absl::StrSplit(h, '.');
  if (parts.size() != 4 || parts[0] != "127") return false;
  for (const std::string& p : parts) {
    if (p.empty() || p.size() > 3 || !std::all_of(p.begin(), p.end(), absl::ascii_isdigit) ||
        std::stoi(p) > 255) {
      return false;
    }
  }
  return true;
}

}  // namespace rlforge
