#include "dist/forked_ranks.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "config/build_info.h"

namespace rlforge::dist {
namespace {

int CountGpusInAChild() {
  const pid_t pid = fork();
  if (pid == 0) _exit(static_cast<int>(std::min<int64_t>(torch::cuda::device_count(), 100)));
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return 0;
  return WEXITSTATUS(status);
}

}  // namespace

std::string WhyNoGpus(int gpus) {
  if (!RLFORGE_TORCH_CUDA) {
    return "this build has a CPU-only libtorch (no CUDA tensors): the NCCL communicator is "
           "compiled here and runs in a -DRLFORGE_CUDA=ON build";
  }
  const int found = CountGpusInAChild();
  if (found >= gpus) return "";
  if (found == 0) return "no CUDA device";
  return absl::StrCat("needs ", gpus, " GPUs, found ", found);
}

std::vector<int> RunForked(int size, const std::function<void(int)>& fn, double deadline_s) {
  std::vector<pid_t> pids;
  for (int r = 0; r < size; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {  // never returns: a throw must not go on to run the parent's other tests
      try {
        fn(r);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d threw: %s\n", r, e.what());
        _exit(2);
      }
      _exit(::testing::Test::HasFailure() ? 1 : 0);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes(pids.size(), 0);
  const Stopwatch clock;
  for (size_t i = 0; i < pids.size(); ++i) {
    int status = 0;
    while (pids[i] > 0 && waitpid(pids[i], &status, WNOHANG) == 0) {
      if (clock.Seconds() > deadline_s) kill(pids[i], SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    codes[i] = pids[i] < 0 ? -1 : WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  }
  return codes;
}

}  // namespace rlforge::dist
