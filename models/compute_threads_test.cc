#include "models/compute_threads.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <thread>

namespace rlforge {
namespace {

TEST(ComputeThreadsTest, SetsTorchAndOpenBlasPools) {
  // Debian's libtorch computes through libblas.so.3, which launch/setup.sh makes OpenBLAS
  // (libopenblas0-pthread). The torch wheel's computes through its own MKL: OpenBLAS is then in
  // a process only where something links libblas.so.3 (the trainer's fused PPO update).
  using GetThreads = int (*)();
  auto get = reinterpret_cast<GetThreads>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  if (!at::hasMKL()) {
    ASSERT_NE(get, nullptr) << "libblas.so.3 is not OpenBLAS";
  }
  EXPECT_EQ(SetComputeThreads(1), 1);
  EXPECT_EQ(torch::get_num_threads(), 1);
  if (get != nullptr) {
    EXPECT_EQ(get(), 1);
  }
  // 0: the host's cores divided among the ranks, at least one.
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  EXPECT_EQ(SetComputeThreads(0, 1), std::max(1, cores));
  EXPECT_EQ(torch::get_num_threads(), std::max(1, cores));
  if (get != nullptr) {
    EXPECT_EQ(get(), std::max(1, cores));
  }
  EXPECT_EQ(SetComputeThreads(0, 4 * cores), 1);
  SetComputeThreads(1);
}

}  // namespace
}  // namespace rlforge
