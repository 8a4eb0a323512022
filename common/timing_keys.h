// Which figures an actor reports are wall-clock timings. A record keeps them apart from its
// metrics, which are reproducible for a seed: the run's metrics can then be compared bit for
// bit while its timings vary. The rule is the name: a timing's key ends in "_s" (seconds, or
// a rate such as "tokens_per_s").
#pragma once

#include <map>
#include <string>
#include <string_view>

namespace rlforge {

// True for keys ending in "_s" ("train_s", "samples_per_s").
inline bool IsTimingKey(std::string_view key) { return key.ends_with("_s"); }

// Copies each (key, value) of `reported` (any map of string to double, e.g. a protobuf map)
// into `timings` or `metrics` by IsTimingKey, overwriting a key already there.
template <typename Map>
void SplitTimingsFromMetrics(const Map& reported, std::map<std::string, double>& timings,
                             std::map<std::string, double>& metrics) {
  for (const auto& [key, value] : reported) {
    (IsTimingKey(key) ? timings : metrics)[key] = value;
  }
}

}  // namespace rlforge
