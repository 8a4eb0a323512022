#include "config/worker_config.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace rlforge {

namespace {

// Engines a language-model job's fleet may hold (rollout.workers, rollout.max_workers).
constexpr int64_t kMaxLmEngines = 64;

// One role's worker counts.
struct Fleet {
  std::string section;
  int64_t workers, max_workers, min_workers;
};

// Why the job takes no joining workers, or "" when it does: language-model loops (synchronous or
// not) and the synchronous control PPO loop take joiners and wait for a minimum.
std::string NoJoinersReason(const JobConfig& c) {
  const AlgorithmSpec& a = *c.job.algorithm;
  if (!a.lm_engines && !a.Reads("sim")) {
    return absl::StrCat("job.algorithm ", a.name,
                        " does not take joining workers (language-model and ppo jobs do)");
  }
  if (!a.lm_engines && c.rollout.max_staleness > 0) {
    return absl::StrCat("asynchronous runs (rollout.max_staleness ", c.rollout.max_staleness,
                        ") do not take joining workers; set rollout.max_staleness: 0");
  }
  return "";
}

// A job without joiners leaves max_workers and min_workers at their defaults.
void CheckNoJoiners(const Fleet& r, const std::string& why, config::CheckContext& ctx) {
  if (r.max_workers != 0 && r.max_workers != r.workers) {
    ctx.Error(r.section + ".max_workers",
              absl::StrCat(why, "; got ", r.max_workers, " (leave it out)"));
  }
  if (r.min_workers != 1) {
    ctx.Error(r.section + ".min_workers",
              absl::StrCat(why, "; got ", r.min_workers, " (leave it out)"));
  }
}

// Every cap within what the job can hold, every minimum within the cap.
void CheckElasticFleet(const JobConfig& c, const Fleet& r, config::CheckContext& ctx) {
  const std::string max_key = r.section + ".max_workers", min_key = r.section + ".min_workers";
  if (r.max_workers != 0 && r.max_workers < r.workers) {
    ctx.Error(max_key, absl::StrCat("must be at least ", r.section, ".workers (", r.workers,
                                    "), got ", r.max_workers));
  }
  if (c.job.algorithm->Reads("sim") && r.max_workers > r.workers &&
      c.sim.backend != SimBackend::kInprocess) {
    // The servers are started (or listed in sim.addresses) per configured worker at the
    // start, on the controller's host: a joiner, from any host, would have none to reach.
    ctx.Error(max_key, absl::StrCat("joining workers step their envs in process: set "
                                    "sim.backend: inprocess (got ",
                                    ChoiceName(c.sim.backend),
                                    "), or leave rollout.max_workers out; got ", r.max_workers));
  }
  if (c.job.algorithm->lm_engines && r.section == "rollout" && r.max_workers > kMaxLmEngines) {
    ctx.Error(max_key, absl::StrCat("language-model jobs run at most ", kMaxLmEngines,
                                    " rollout engines (each holds a copy of the policy and "
                                    "loads every version), got ",
                                    r.max_workers));
  }
  const int64_t cap = WorkerCap(r.workers, r.max_workers);
  if (r.min_workers > cap) {
    ctx.Error(min_key, absl::StrCat("must not exceed ", max_key, " (", cap,
                                    r.max_workers == 0 ? ", from " + r.section + ".workers" : "",
                                    "), got ", r.min_workers));
  }
}

}  // namespace

void CheckWorkerFleets(const JobConfig& c, config::CheckContext& ctx) {
  if (c.job.algorithm == nullptr) return;
  const std::string no_joiners = NoJoinersReason(c);
  const Fleet fleets[] = {
      {"rollout", c.rollout.workers, c.rollout.max_workers, c.rollout.min_workers},
      {"reward", c.reward.workers, c.reward.max_workers, c.reward.min_workers}};
  for (const Fleet& r : fleets) {
    if (r.section == "reward" && !c.job.algorithm->lm_engines) continue;  // only they read it
    if (no_joiners.empty()) {
      CheckElasticFleet(c, r, ctx);
    } else {
      CheckNoJoiners(r, no_joiners, ctx);
    }
  }
}

void CheckLmEngineCount(const JobConfig& c, config::CheckContext& ctx) {
  if (c.job.algorithm == nullptr || !c.job.algorithm->lm_engines) return;
  if (c.rollout.workers > kMaxLmEngines) {
    ctx.Error("rollout.workers",
              absl::StrCat("language-model jobs run at most ", kMaxLmEngines,
                           " rollout engines (each holds a copy of the policy and loads every "
                           "version), got ",
                           c.rollout.workers));
  }
}

}  // namespace rlforge
