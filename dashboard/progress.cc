#include "dashboard/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace rlforge::dashboard {

namespace {

int TerminalWidth(std::FILE* out) {
  winsize ws{};
  if (ioctl(fileno(out), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 100;
}

}  // namespace

double EtaSeconds(int64_t step, int64_t resumed_from, int64_t total, double elapsed_s) {
  const int64_t done = step - resumed_from;
  if (done <= 0 || total <= step) return 0;
  return elapsed_s / static_cast<double>(done) * static_cast<double>(total - step);
}

std::string FormatDuration(double seconds) {
  int64_t s = static_cast<int64_t>(seconds + 0.5);
  if (s < 60) return absl::StrFormat("%ds", s);
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%dh%02dm", s / 3600, (s % 3600) / 60);
}

ProgressPrinter::ProgressPrinter(std::FILE* out, bool interactive, std::string label, int width)
    : out_(out), interactive_(interactive), label_(std::move(label)), width_(width) {}

void ProgressPrinter::SetResumedFrom(int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  resumed_from_ = step;
}

std::vector<std::string> ProgressPrinter::KeyMetrics(const std::map<std::string, double>& metrics,
                                                     size_t n) {
  static const char* const kPreferred[] = {
      "episodic_return", "reward",          "accuracy", "approx_kl",   "kl",        "entropy",
      "clipfrac",        "response_length", "loss",     "policy_loss", "value_loss"};
  std::vector<std::string> keys;
  for (const char* k : kPreferred) {
    if (keys.size() < n && metrics.count(k)) keys.push_back(k);
  }
  for (const auto& [k, v] : metrics) {
    if (keys.size() >= n) break;
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  }
  return keys;
}

std::string ProgressPrinter::PlainLine(int64_t step, int64_t total, double elapsed_s,
                                       const std::map<std::string, double>& metrics,
                                       const std::map<std::string, double>& timings) const {
  std::string line = absl::StrFormat("[%s] iter %d/%d  %.1fs  eta %.1fs", label_, step, total,
                                     elapsed_s, EtaSeconds(step, resumed_from_, total, elapsed_s));
  for (const auto& [k, v] : metrics) absl::StrAppendFormat(&line, "  %s=%.4g", k, v);
  for (const auto& [k, v] : timings) absl::StrAppendFormat(&line, "  %s=%.4g", k, v);
  return line;
}

std::string ProgressPrinter::BarLine(int64_t step, int64_t total, double elapsed_s,
                                     const std::map<std::string, double>& metrics) const {
  int width = width_ > 0 ? width_ : TerminalWidth(out_);
  double frac = total > 0 ? std::clamp(static_cast<double>(step) / total, 0.0, 1.0) : 0;
  const int bar = 24;
  int filled = static_cast<int>(frac * bar + 1e-9);
  std::string line = absl::StrFormat(
      "[%s] [%s%s] %d/%d %3.0f%%  %s  eta %s", label_, std::string(filled, '#'),
      std::string(bar - filled, '.'), step, total, frac * 100, FormatDuration(elapsed_s),
      FormatDuration(EtaSeconds(step, resumed_from_, total, elapsed_s)));
  for (const std::string& k : KeyMetrics(metrics, 4)) {
    std::string item = absl::StrFormat("  %s=%.4g", k, metrics.at(k));
    if (static_cast<int>(line.size() + item.size()) >= width) break;
    line += item;
  }
  if (static_cast<int>(line.size()) >= width) line.resize(std::max(0, width - 1));
  return line;
}

void ProgressPrinter::Update(int64_t step, int64_t total, double elapsed_s,
                             const std::map<std::string, double>& metrics,
                             const std::map<std::string, double>& timings) {
  std::lock_guard<std::mutex> lock(mu_);
  if (interactive_) {
    // \r then clear-to-end: redraw in place.
    last_bar_ = BarLine(step, total, elapsed_s, metrics);
    std::fprintf(out_, "\r\033[K%s", last_bar_.c_str());
    open_line_ = true;
  } else {
    std::fprintf(out_, "%s\n", PlainLine(step, total, elapsed_s, metrics, timings).c_str());
  }
  std::fflush(out_);
}

void ProgressPrinter::Finish() {
  std::lock_guard<std::mutex> lock(mu_);
  if (open_line_) std::fprintf(out_, "\n");
  open_line_ = false;
  last_bar_.clear();
  std::fflush(out_);
}

void ProgressPrinter::WithBarHidden(const std::function<void()>& write) {
  std::lock_guard<std::mutex> lock(mu_);
  if (open_line_) {
    std::fprintf(out_, "\r\033[K");
    std::fflush(out_);
  }
  write();
  if (open_line_) {
    std::fprintf(out_, "%s", last_bar_.c_str());
    std::fflush(out_);
  }
}

namespace {

class BarAwareSink final : public spdlog::sinks::sink {
 public:
  BarAwareSink(spdlog::sink_ptr inner, std::shared_ptr<ProgressPrinter> progress)
      : inner_(std::move(inner)), progress_(std::move(progress)) {}
  void log(const spdlog::details::log_msg& msg) override {
    progress_->WithBarHidden([&] { inner_->log(msg); });
  }
  void flush() override { inner_->flush(); }
  void set_pattern(const std::string& pattern) override { inner_->set_pattern(pattern); }
  void set_formatter(std::unique_ptr<spdlog::formatter> f) override {
    inner_->set_formatter(std::move(f));
  }

 private:
  spdlog::sink_ptr inner_;
  std::shared_ptr<ProgressPrinter> progress_;
};

}  // namespace

spdlog::sink_ptr MakeBarAwareSink(spdlog::sink_ptr inner,
                                  std::shared_ptr<ProgressPrinter> progress) {
  return std::make_shared<BarAwareSink>(std::move(inner), std::move(progress));
}

}  // namespace rlforge::dashboard
