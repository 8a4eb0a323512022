// The engine through the kernel library's CPU references against its own CPU path
// (llm_engine_kernels_cases.h holds the cases; llm_engine_kernels_gpu_test.cc runs them on CUDA).
#include "rollout/llm_engine_kernels_cases.h"

namespace rlforge {
namespace {

INSTANTIATE_TEST_SUITE_P(Cpu, EngineKernelLibraryTest, ::testing::Values(torch::kCPU));

}  // namespace
}  // namespace rlforge
