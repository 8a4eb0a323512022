#include "controller/run_context.h"

#include <map>
#include <string>

#include "common/logging.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace rlforge {

absl::Status RunContext::EndIteration(const IterationRecord& rec) {
  double elapsed = static_cast<double>(RealClock::Get()->NowMicros() - start_us_) * 1e-6;
  nlohmann::json j;
  j["step"] = rec.step;
  j["metrics"] = rec.metrics;
  const FaultStats& f = controller_->faults();
  if (f.actors_lost > 0) {  // the job's totals, once a worker was lost
    j["metrics"]["faults/actors_lost"] = f.actors_lost;
    j["metrics"]["faults/restarts"] = f.restarts;
    j["metrics"]["faults/works_given_back"] = f.works_given_back;
  }
  const ElasticStats& el = controller_->elastic();
  if (el.joins > 0 || el.leaves > 0) {  // the job's totals, once a worker joined or left
    j["metrics"]["elastic/joins"] = el.joins;
    j["metrics"]["elastic/leaves"] = el.leaves;
    j["metrics"]["elastic/works_handed_back"] = el.works_handed_back;
  }
  j["timings"] = rec.timings;
  j["timings"]["elapsed_s"] = elapsed;
  RETURN_IF_ERROR(sinks_.log->Append(j));
  sinks_.state->AddIteration(j);
  WriteTensorBoard(rec, elapsed);
  int64_t total = total_ > 0 ? total_ : config_->job.iterations;
  sinks_.progress->Update(rec.step, total, elapsed, rec.metrics, rec.timings);
  return absl::OkStatus();
}

void RunContext::WriteTensorBoard(const IterationRecord& rec, double elapsed) {
  if (sinks_.tensorboard == nullptr) return;
  std::map<std::string, double> scalars;
  for (const auto& [k, v] : rec.metrics) scalars["metrics/" + k] = v;
  for (const auto& [k, v] : rec.timings) scalars["timings/" + k] = v;
  scalars["timings/elapsed_s"] = elapsed;
  absl::Status s =
      sinks_.tensorboard->WriteScalars(rec.step, dashboard::WallTimeSeconds(), scalars);
  if (!s.ok()) {
    spdlog::warn("TensorBoard events stop here: {}", Msg(s));
    sinks_.tensorboard = nullptr;
  }
}

}  // namespace rlforge
