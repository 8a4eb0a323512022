#include "dashboard/progress.h"

#include <gtest/gtest.h>

#include <cstdio>

namespace rlforge::dashboard {
namespace {

std::string Capture(bool interactive) {
  char* buf = nullptr;
  size_t len = 0;
  std::FILE* f = open_memstream(&buf, &len);
  {
    ProgressPrinter p(f, interactive, "ppo", 80);
    p.Update(1, 4, 1.0, {{"episodic_return", 9.5}, {"lr", 0.001}}, {{"train_s", 0.25}});
    p.Update(2, 4, 2.0, {{"episodic_return", 12.0}, {"lr", 0.001}}, {{"train_s", 0.25}});
    p.Finish();
  }
  std::fclose(f);
  std::string out(buf, len);
  free(buf);
  return out;
}

TEST(ProgressTest, PlainLinesKeepTheParseableFormatWhenNotATerminal) {
  std::string out = Capture(false);
  EXPECT_EQ(out,
            "[ppo] iter 1/4  1.0s  eta 3.0s  episodic_return=9.5  lr=0.001  train_s=0.25\n"
            "[ppo] iter 2/4  2.0s  eta 2.0s  episodic_return=12  lr=0.001  train_s=0.25\n");
  EXPECT_EQ(out.find('\r'), std::string::npos);
}

// Issue 42: "iter 1805/7813 ... eta 11.9s" after `--resume` at 1800 with about 21 s left:
// the attempt's elapsed time was divided by the run's step, not by the attempt's iterations.
TEST(ProgressTest, EtaAfterResumeCountsOnlyThisAttemptsIterations) {
  ProgressPrinter p(stdout, false, "ppo", 80);
  p.SetResumedFrom(1800);
  // 0.05 s for 5 iterations: 0.01 s each, 6008 left.
  EXPECT_EQ(p.PlainLine(1805, 7813, 0.05, {}, {}), "[ppo] iter 1805/7813  0.1s  eta 60.1s");
  EXPECT_DOUBLE_EQ(EtaSeconds(1805, 1800, 7813, 0.05), 0.05 / 5 * 6008);
  EXPECT_DOUBLE_EQ(EtaSeconds(5, 0, 10, 1.0), 1.0);  // a fresh run: its own step count
  EXPECT_EQ(EtaSeconds(1800, 1800, 7813, 0.5), 0);   // nothing done yet in this attempt
  EXPECT_EQ(EtaSeconds(10, 0, 10, 3.0), 0);          // done
}

TEST(ProgressTest, TerminalBarRedrawsInPlaceAndFitsTheWidth) {
  std::string out = Capture(true);
  EXPECT_EQ(out.find('\n'), out.size() - 1) << "one line, ended by Finish";
  EXPECT_NE(out.find("\r\033[K[ppo] [############............] 2/4  50%  2s  eta 2s"),
            std::string::npos)
      << out;
  ProgressPrinter p(stdout, true, "ppo", 40);
  EXPECT_LT(p.BarLine(1, 3, 1, {{"episodic_return", 1}, {"entropy", 2}}).size(), 40u);
}

TEST(ProgressTest, OtherOutputPrintsAboveTheBar) {
  char* buf = nullptr;
  size_t len = 0;
  std::FILE* f = open_memstream(&buf, &len);
  {
    ProgressPrinter p(f, true, "echo", 60);
    p.Update(1, 2, 1.0, {}, {});
    p.WithBarHidden([&] { std::fprintf(f, "a log line\n"); });
    p.Finish();
    p.WithBarHidden([&] { std::fprintf(f, "after\n"); });
  }
  std::fclose(f);
  std::string out(buf, len);
  free(buf);
  std::string bar = "[echo] [############............] 1/2  50%  1s  eta 1s";
  EXPECT_EQ(out, "\r\033[K" + bar + "\r\033[Ka log line\n" + bar + "\nafter\n");
}

TEST(ProgressTest, KeyMetricsPutLearningSignalsFirst) {
  auto keys =
      ProgressPrinter::KeyMetrics({{"a", 1}, {"entropy", 1}, {"episodic_return", 1}, {"z", 1}}, 3);
  EXPECT_EQ(keys, (std::vector<std::string>{"episodic_return", "entropy", "a"}));
  EXPECT_EQ(FormatDuration(187), "3m07s");
  EXPECT_EQ(FormatDuration(3720), "1h02m");
}

}  // namespace
}  // namespace rlforge::dashboard
