// SIGINT/SIGTERM set a stop flag that the long-running commands poll;
// SIGPIPE is ignored (a closed peer is an error return, not a death).
#pragma once

#include <atomic>

namespace rlforge {

// The flag: 0, or the number of the signal that asked to stop.
std::atomic<int>& StopFlag();
// How many SIGINT/SIGTERM have come (a checkpointing job stops at once on the second).
std::atomic<int>& SignalCount();
void InstallSignalHandlers();

}  // namespace rlforge
