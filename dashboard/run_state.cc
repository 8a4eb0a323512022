#include "dashboard/run_state.h"

#include <cstdint>

namespace rlforge::dashboard {

RunState::RunState(const Clock* clock, size_t max_iterations, size_t max_samples)
    : clock_(clock),
      max_iterations_(max_iterations),
      max_samples_(max_samples),
      start_us_(clock->NowMicros()) {}

void RunState::SetInfo(RunInfo info) {
  std::lock_guard<std::mutex> lock(mu_);
  info_ = std::move(info);
}

void RunState::SetTotalIterations(int64_t total) {
  std::lock_guard<std::mutex> lock(mu_);
  info_.total_iterations = total;
}

void RunState::SetState(const std::string& state, const std::string& message) {
  std::lock_guard<std::mutex> lock(mu_);
  state_ = state;
  message_ = message;
}

void RunState::AddIteration(nlohmann::json record) {
  int64_t step = record.value("step", int64_t{0});
  auto held = std::make_shared<const nlohmann::json>(std::move(record));
  std::lock_guard<std::mutex> lock(mu_);
  iterations_.push_back({step, std::move(held)});
  while (iterations_.size() > max_iterations_) {
    iterations_.pop_front();
    ++iterations_dropped_;
  }
}

void RunState::SetActors(std::vector<ActorRow> actors, std::map<std::string, uint64_t> drops) {
  std::lock_guard<std::mutex> lock(mu_);
  actors_.swap(actors);
  drops_.swap(drops);
}

void RunState::AddSamples(const std::vector<SampleRow>& samples) {
  if (max_samples_ == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (const SampleRow& s : samples) {
    samples_.push_back(s);
    if (samples_.size() > max_samples_) samples_.pop_front();
  }
}

Snapshot RunState::Take(int64_t since_step, size_t max_records) const {
  Snapshot s;
  s.now_us = clock_->NowMicros();
  s.start_us = start_us_;
  std::lock_guard<std::mutex> lock(mu_);
  s.info = info_;
  s.state = state_;
  s.message = message_;
  // Records are in step order: find the first one after since_step from the back.
  size_t first = iterations_.size();
  while (first > 0 && iterations_.size() - first < max_records &&
         iterations_[first - 1].step > since_step) {
    --first;
  }
  s.iterations.reserve(iterations_.size() - first);
  for (size_t i = first; i < iterations_.size(); ++i) s.iterations.push_back(iterations_[i].record);
  s.iterations_dropped = iterations_dropped_;
  s.actors = actors_;
  s.drops = drops_;
  s.samples.assign(samples_.begin(), samples_.end());
  return s;
}

}  // namespace rlforge::dashboard
