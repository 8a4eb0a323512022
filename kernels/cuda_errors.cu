#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda_kernels.h"

namespace rlforge::kernels::cuda {

std::string ErrorText(int error) {
  const auto e = static_cast<cudaError_t>(error);
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

}  // namespace rlforge::kernels::cuda
