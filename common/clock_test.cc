#include "common/clock.h"

#include <gtest/gtest.h>

namespace rlforge {
namespace {

TEST(StopwatchTest, MeasuresTheFakeClock) {
  FakeClock clock;
  Stopwatch w(&clock);
  EXPECT_EQ(w.Seconds(), 0.0);
  clock.AdvanceMillis(1500);
  EXPECT_DOUBLE_EQ(w.Seconds(), 1.5);
  clock.AdvanceMicros(250);
  EXPECT_DOUBLE_EQ(w.Seconds(), 1.50025);
}

TEST(StopwatchTest, RestartStartsFromNow) {
  FakeClock clock;
  Stopwatch w(&clock);
  clock.AdvanceMillis(700);
  w.Restart();
  EXPECT_EQ(w.Seconds(), 0.0);
  clock.AdvanceMillis(300);
  EXPECT_DOUBLE_EQ(w.Seconds(), 0.3);
}

TEST(StopwatchTest, LapsAddUpToTheTotalWithAnAutoAdvancingClock) {
  FakeClock clock;
  clock.set_auto_advance_micros(7);  // every read moves time: no read may be lost between laps
  Stopwatch total(&clock);
  Stopwatch lap(&clock);
  double sum = 0;
  for (int i = 0; i < 5; ++i) {
    clock.AdvanceMillis(10);
    sum += lap.Lap();
  }
  const double whole = total.Seconds();
  // `total` started one read (7 us) before `lap`, and its last read is one read after.
  EXPECT_NEAR(whole - sum, 14e-6, 1e-12);
  EXPECT_NEAR(sum, 0.05 + 5 * 7e-6, 1e-12);
}

TEST(StopwatchTest, DefaultsToTheRealClock) {
  Stopwatch w;
  const double s = w.Seconds();
  EXPECT_GE(s, 0.0);
  EXPECT_LT(s, 60.0);
}

}  // namespace
}  // namespace rlforge
