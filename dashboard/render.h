// What the dashboard's endpoints return, rendered from a Snapshot.
//
// Snapshot -> JSON for /api/status, /api/metrics, /api/actors, /api/samples,
// /api/config, and Prometheus text exposition for /metrics.
// Pure functions: tested without sockets.
#pragma once

#include <string>

#include "dashboard/run_state.h"
#include "nlohmann/json.hpp"

namespace rlforge::dashboard {

// {run, algorithm, job_id, run_dir, state, message, step, total, elapsed_s,
//  eta_s, latest: {metrics, timings}, actors: {total, <state>: n}, dropped_messages}
nlohmann::json StatusJson(const Snapshot& s);
// {records: [metrics.jsonl records after `since`], dropped: n}
nlohmann::json MetricsJson(const Snapshot& s);
// [{id, role, rank, host, pid, state, heartbeat_age_s, restarts, current_work,
//   policy_version, works_done, external}]
nlohmann::json ActorsJson(const Snapshot& s);
nlohmann::json SamplesJson(const Snapshot& s);
nlohmann::json ConfigJson(const Snapshot& s);

// Prometheus text format 0.0.4: gauges and counters, actors labelled by role and rank.
std::string PrometheusText(const Snapshot& s);

// A metric or timing key as a Prometheus name fragment ([a-zA-Z0-9_]).
std::string PrometheusName(const std::string& key);

}  // namespace rlforge::dashboard
