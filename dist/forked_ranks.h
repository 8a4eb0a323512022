// Test support for GPU tests of groups: ranks as forked processes (NCCL takes one GPU per
// rank, and a rank that must die mid-job has to be a process). The calling process never
// touches CUDA: a process that initialised CUDA cannot fork children that use it, so even the
// GPU count comes from a child.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace rlforge::dist {

// "" when this build and machine can run a test needing `gpus` GPUs; else why not, for
// GTEST_SKIP: "this build has a CPU-only libtorch ...", "no CUDA device", or "needs 2 GPUs,
// found 1".
std::string WhyNoGpus(int gpus);

// Runs fn(rank) in `size` forked processes; a child whose expectations failed exits 1, one
// that threw exits 2.
// Returns each child's exit code (-signal when a signal ended it). Children still running
// after `deadline_s` are killed, so a hung rank fails the test instead of hanging it.
std::vector<int> RunForked(int size, const std::function<void(int)>& fn, double deadline_s = 120);

}  // namespace rlforge::dist
