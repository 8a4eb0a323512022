// The engine through the CUDA kernels (model, KV pools and block tables on the GPU) against
// its own CPU path: the cases of llm_engine_kernels_cases.h on CUDA. Built with the kernel
// library; every test skips, saying why, without a CUDA libtorch or a usable sm_90 GPU.
#include "rollout/llm_engine_kernels_cases.h"

namespace rlforge {
namespace {

INSTANTIATE_TEST_SUITE_P(Cuda, EngineKernelLibraryTest, ::testing::Values(torch::kCUDA));

}  // namespace
}  // namespace rlforge
