// Time source, injectable so controller logic is tested without sleeps.
//
// RealClock reads CLOCK_MONOTONIC. FakeClock only moves when a test advances it.
// Both are safe to call from any thread. Stopwatch measures elapsed seconds on either.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace rlforge {

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic time in microseconds; only differences are meaningful.
  virtual int64_t NowMicros() const = 0;
  double NowSeconds() const { return static_cast<double>(NowMicros()) * 1e-6; }
};

class RealClock final : public Clock {
 public:
  int64_t NowMicros() const override {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  // A process-wide instance; RealClock has no state, so sharing it is harmless.
  static RealClock* Get() {
    static RealClock clock;
    return &clock;
  }
};

class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t start_micros = 1'000'000) : now_(start_micros) {}
  // Each read also moves time forward by the auto-advance step (default 0),
  // so loops that wait on the clock terminate in tests.
  int64_t NowMicros() const override { return now_.fetch_add(step_.load()); }
  void set_auto_advance_micros(int64_t step) { step_ = step; }
  void AdvanceMicros(int64_t d) { now_.fetch_add(d); }
  void AdvanceMillis(int64_t d) { now_.fetch_add(d * 1000); }

 private:
  mutable std::atomic<int64_t> now_;
  std::atomic<int64_t> step_{0};
};

// Seconds elapsed since construction (or the last Restart/Lap), read from `clock`, which
// must outlive the Stopwatch. Microsecond resolution. One thread at a time per Stopwatch.
class Stopwatch {
 public:
  explicit Stopwatch(const Clock* clock = RealClock::Get())
      : clock_(clock), start_(clock->NowMicros()) {}
  double Seconds() const { return static_cast<double>(clock_->NowMicros() - start_) * 1e-6; }
  void Restart() { start_ = clock_->NowMicros(); }
  // Seconds() and Restart() on one clock reading: consecutive laps add up to the total.
  double Lap() {
    const int64_t now = clock_->NowMicros();
    const double s = static_cast<double>(now - start_) * 1e-6;
    start_ = now;
    return s;
  }

 private:
  const Clock* clock_;
  int64_t start_;
};

}  // namespace rlforge
