#include "models/compute_threads.h"

#include <dlfcn.h>
#include <torch/torch.h>

#include <algorithm>
#include <thread>

namespace rlforge {

int SetComputeThreads(int64_t threads, int64_t ranks) {
  int n = static_cast<int>(threads);
  if (n <= 0) {
    n = std::max<int>(1, static_cast<int>(std::thread::hardware_concurrency() /
                                          static_cast<unsigned>(std::max<int64_t>(ranks, 1))));
  }
  torch::set_num_threads(n);
  // Looked up, not linked: libblas.so.3 may be another BLAS (Debian's
  // alternatives), which has no pool of its own to set.
  using SetThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
    set(n);
  }
  return n;
}

}  // namespace rlforge
