// The console's view of a run: one progress line per iteration.
//
// iteration record -> ProgressPrinter -> a redrawn bar (terminal) or plain lines (pipe, file)
//
// Plain lines are the stable, parseable format:
//   [ppo] iter 3/10  1.2s  eta 2.8s  episodic_return=21.5  ...  rollout_s=0.1 ...
// On a terminal the bar redraws in place (\r) and shows the key metrics only.
// Thread-safe; log lines on the same terminal go through MakeBarAwareSink so
// they print above the bar instead of into it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "spdlog/sinks/sink.h"

namespace rlforge::dashboard {

class ProgressPrinter {
 public:
  // `out` is not owned. `width` 0 asks the terminal (when interactive).
  ProgressPrinter(std::FILE* out, bool interactive, std::string label, int width = 0);

  // A resumed attempt starts after iteration `step` (its checkpoint's): the ETA counts only
  // the iterations this attempt did in its elapsed time.
  void SetResumedFrom(int64_t step);

  void Update(int64_t step, int64_t total, double elapsed_s,
              const std::map<std::string, double>& metrics,
              const std::map<std::string, double>& timings);
  // Ends the bar's line so later output starts on a fresh one.
  void Finish();
  // Runs `write` (other output to the terminal) with the bar erased, then redraws it.
  void WithBarHidden(const std::function<void()>& write);

  // The texts Update prints, for tests.
  std::string PlainLine(int64_t step, int64_t total, double elapsed_s,
                        const std::map<std::string, double>& metrics,
                        const std::map<std::string, double>& timings) const;
  std::string BarLine(int64_t step, int64_t total, double elapsed_s,
                      const std::map<std::string, double>& metrics) const;

  // The metrics a bar has room for, most telling first.
  static std::vector<std::string> KeyMetrics(const std::map<std::string, double>& metrics,
                                             size_t n);

 private:
  std::FILE* out_;
  bool interactive_;
  std::string label_;
  int width_;
  int64_t resumed_from_ = 0;
  std::mutex mu_;
  bool open_line_ = false;
  std::string last_bar_;
};

// A log sink that writes through `inner` with the progress bar hidden.
spdlog::sink_ptr MakeBarAwareSink(spdlog::sink_ptr inner,
                                  std::shared_ptr<ProgressPrinter> progress);

// "42s", "3m07s", "1h02m".
std::string FormatDuration(double seconds);

// Seconds left at iteration `step` of `total`, by the pace of this attempt: `elapsed_s` since
// it started after iteration `resumed_from` (0 for a fresh run). 0 once done or before the
// attempt's first iteration.
double EtaSeconds(int64_t step, int64_t resumed_from, int64_t total, double elapsed_s);

}  // namespace rlforge::dashboard
