#include "cli/signals.h"

#include <signal.h>

namespace rlforge {

namespace {
std::atomic<int> g_stop{0};
std::atomic<int> g_count{0};
void OnSignal(int sig) {
  g_stop.store(sig);
  g_count.fetch_add(1);
}
}  // namespace

std::atomic<int>& StopFlag() { return g_stop; }
std::atomic<int>& SignalCount() { return g_count; }

void InstallSignalHandlers() {
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

}  // namespace rlforge
