// Device memory shared between processes of one host through CUDA IPC, over the CUDA runtime
// alone (no libtorch): the trainer allocates and exports, each engine maps the export once.
//
// trainer: CudaIpcBuffer::Allocate(device, bytes) -> handle() (hex, travels in WeightsReady's
//   location) -> engines: CudaIpcMapping::Open(handle, their device) -> data() (a pointer
//   their device reads, peer access enabled when the devices differ)
//
// The mapping side must be another process: CUDA refuses to open a handle in the process
// that exported it (rlforge's engines are processes of their own).
// Compiled wherever the CUDA toolkit is (so CI compiles it); linked into rlforge only by a
// build whose libtorch has CUDA. Errors name the call, the device and cudaGetErrorString.
// Objects are not thread-safe; the memory outlives nothing that points into it (the mapping
// must close before the export is freed, which the protocol's versions ensure: an engine
// opens a publisher's export and keeps it while the publisher lives).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace rlforge {

class CudaIpcBuffer {
 public:
  // `bytes` of device memory on GPU `device` (cudaMalloc: its own allocation, so the handle
  // maps exactly it), exported.
  static absl::StatusOr<std::unique_ptr<CudaIpcBuffer>> Allocate(int device, uint64_t bytes);
  ~CudaIpcBuffer();
  void* data() const { return data_; }
  uint64_t size() const { return size_; }
  int device() const { return device_; }
  // The cudaIpcMemHandle_t, as lower-case hex.
  const std::string& handle() const { return handle_; }

 private:
  CudaIpcBuffer(void* data, uint64_t size, int device, std::string handle)
      : data_(data), size_(size), device_(device), handle_(std::move(handle)) {}
  void* data_;
  uint64_t size_;
  int device_;
  std::string handle_;
};

class CudaIpcMapping {
 public:
  // Maps another process's export (`handle`: CudaIpcBuffer::handle) for GPU `device` of this
  // process. An error names the handle's source when it is malformed or cannot be opened.
  static absl::StatusOr<std::unique_ptr<CudaIpcMapping>> Open(const std::string& handle,
                                                              int device);
  ~CudaIpcMapping();
  void* data() const { return data_; }

 private:
  CudaIpcMapping(void* data, int device) : data_(data), device_(device) {}
  void* data_;
  int device_;
};

// Waits until GPU `device` finished all work issued to it by this process.
absl::Status SynchronizeCudaDevice(int device);

}  // namespace rlforge
