// SetupProgress: how a long set-up step (loading a checkpoint, building a model) says how far
// it has come, so that an actor's heartbeats carry a phase ("loading model 37%") instead of
// silence.
//
// step -> progress("loading model 37%") -> the actor's status -> its next heartbeat
//
// Called on the thread doing the set-up; cheap enough to call per tensor. An empty function
// reports nowhere (unit tests, `rlforge generate`).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace rlforge {

using SetupProgress = std::function<void(const std::string& phase)>;

// Calls `progress` with "<what> <percent>%" when `done` of `total` crosses a new whole
// percent; `*last_percent` (start at -1) remembers the last one reported.
inline void ReportPercent(const SetupProgress& progress, const std::string& what, int64_t done,
                          int64_t total, int* last_percent) {
  if (!progress || total <= 0) return;
  const int percent = static_cast<int>(done * 100 / total);
  if (percent == *last_percent) return;
  *last_percent = percent;
  progress(what + " " + std::to_string(percent) + "%");
}

}  // namespace rlforge
