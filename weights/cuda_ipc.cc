#include "weights/cuda_ipc.h"

#include <cuda_runtime.h>

#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace rlforge {

namespace {

absl::Status CudaError(cudaError_t e, const char* call, int device) {
  return absl::InternalError(absl::StrCat(call, " on cuda:", device, ": ", cudaGetErrorString(e)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaIpcBuffer>> CudaIpcBuffer::Allocate(int device, uint64_t bytes) {
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    return CudaError(e, "cudaSetDevice", device);
  }
  void* data = nullptr;
  if (cudaError_t e = cudaMalloc(&data, bytes); e != cudaSuccess) {
    return CudaError(e, absl::StrCat("cudaMalloc(", bytes, " bytes)").c_str(), device);
  }
  cudaIpcMemHandle_t h;
  if (cudaError_t e = cudaIpcGetMemHandle(&h, data); e != cudaSuccess) {
    cudaFree(data);
    return CudaError(e, "cudaIpcGetMemHandle", device);
  }
  std::string raw(sizeof(h), '\0');
  std::memcpy(raw.data(), &h, sizeof(h));
  return std::unique_ptr<CudaIpcBuffer>(
      new CudaIpcBuffer(data, bytes, device, absl::BytesToHexString(raw)));
}

CudaIpcBuffer::~CudaIpcBuffer() {
  cudaSetDevice(device_);
  cudaFree(data_);
}

absl::StatusOr<std::unique_ptr<CudaIpcMapping>> CudaIpcMapping::Open(const std::string& handle,
                                                                     int device) {
  cudaIpcMemHandle_t h;
  if (handle.size() != 2 * sizeof(h) ||
      handle.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA IPC handle '", handle, "' is not ",
                                                   2 * sizeof(h), " lower-case hex digits"));
  }
  const std::string raw = absl::HexStringToBytes(handle);
  std::memcpy(&h, raw.data(), sizeof(h));
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    return CudaError(e, "cudaSetDevice", device);
  }
  void* data = nullptr;
  if (cudaError_t e = cudaIpcOpenMemHandle(&data, h, cudaIpcMemLazyEnablePeerAccess);
      e != cudaSuccess) {
    return CudaError(e, "cudaIpcOpenMemHandle", device);
  }
  return std::unique_ptr<CudaIpcMapping>(new CudaIpcMapping(data, device));
}

CudaIpcMapping::~CudaIpcMapping() {
  cudaSetDevice(device_);
  cudaIpcCloseMemHandle(data_);
}

absl::Status SynchronizeCudaDevice(int device) {
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    return CudaError(e, "cudaSetDevice", device);
  }
  if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) {
    return CudaError(e, "cudaDeviceSynchronize", device);
  }
  return absl::OkStatus();
}

}  // namespace rlforge
