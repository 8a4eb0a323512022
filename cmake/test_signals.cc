// Linked into every gtest binary (rlforge_test): like the rlforge binary (cli/signals.cc), a
// test takes a write to a socket its peer closed as an error, not a SIGPIPE that kills it (a
// gloo or ZeroMQ peer that leaves mid-test, on purpose or not).
#include <csignal>

namespace {

const bool kSigpipeIgnored = [] {
  std::signal(SIGPIPE, SIG_IGN);
  return true;
}();

}  // namespace
