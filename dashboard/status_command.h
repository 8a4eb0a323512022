// `rlforge status RUN_DIR_OR_URL`: a run's state in the terminal.
//
// URL -> GET /api/status + /api/actors;  run directory -> status.json (and,
// while the run is live, its dashboard_url) or metrics.jsonl -> the same text.
//
// A run directory whose status.json says the run is going (starting, running, waiting) is
// checked against its controller (CheckProcess, common/process_identity.h): a controller gone
// makes the state "dead (controller pid N gone; last written ...)", one on another host whose
// dashboard does not answer "unknown (...)". The ETA is this attempt's pace (a resumed run's
// elapsed time counts from its resume).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace rlforge::dashboard {

// Formats /api/status and /api/actors as the terminal shows them.
std::string FormatStatus(const nlohmann::json& status, const nlohmann::json& actors);

// The text for `target` (an http:// URL or a run directory). `token` is sent
// when non-empty.
absl::StatusOr<std::string> StatusText(const std::string& target, const std::string& token);

}  // namespace rlforge::dashboard
