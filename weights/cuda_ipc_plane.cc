#include "weights/cuda_ipc_plane.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status.h"
#include "config/build_info.h"

#if RLFORGE_TORCH_CUDA
#include "weights/cuda_ipc.h"
#include "weights/slot_markers.h"
#endif

namespace rlforge {

#if RLFORGE_TORCH_CUDA

namespace {

// Slots start at multiples of 256 bytes (cudaMalloc's alignment), so every bucket does too.
int Index(torch::Device d) { return d.has_index() ? d.index() : 0; }

uint64_t SlotStride(const proto::WeightManifest& m) { return (m.total_bytes() + 255) / 256 * 256; }

torch::Tensor SlotTensor(void* base, uint64_t stride, int64_t version, uint64_t bytes,
                         torch::Device device) {
  char* slot = static_cast<char*>(base) + static_cast<uint64_t>(version % 2) * stride;
  return torch::from_blob(slot, {static_cast<int64_t>(bytes)},
                          torch::dtype(torch::kUInt8).device(device));
}

torch::Tensor BucketOf(const torch::Tensor& slot, const proto::WeightManifest& m, int64_t bucket) {
  return slot.narrow(0, bucket * static_cast<int64_t>(m.bucket_bytes()),
                     static_cast<int64_t>(BucketBytes(m, bucket)));
}

class Sink final : public CudaIpcSink {
 public:
  Sink(const proto::WeightManifest& m, torch::Device device,
       std::unique_ptr<SlotMarkerWriter> markers, std::unique_ptr<CudaIpcBuffer> buffer)
      : m_(m), device_(device), markers_(std::move(markers)), buffer_(std::move(buffer)) {}

  std::string location() const override {
    return absl::StrCat(kCudaIpcPrefix, markers_->name(), ":", SlotStride(m_), ":",
                        buffer_->handle());
  }

  absl::StatusOr<torch::Tensor> Acquire(int64_t version, int64_t bucket) override {
    if (bucket == 0) {
      version_ = version;
      markers_->BeginWrite(version);  // readers of the version two back stop trusting the slot
      slot_ = SlotTensor(buffer_->data(), SlotStride(m_), version, m_.total_bytes(), device_);
    }
    return BucketOf(slot_, m_, bucket);
  }
  absl::Status Commit(int64_t, int64_t, uint64_t) override { return absl::OkStatus(); }
  absl::Status Drain() override {
    if (!slot_.defined()) return absl::OkStatus();
    SynchronizeWith(slot_);  // the packing ran on torch's stream: done before the marker says so
    markers_->EndWrite(version_);
    slot_ = torch::Tensor();
    return absl::OkStatus();
  }

 private:
  const proto::WeightManifest m_;
  torch::Device device_;
  std::unique_ptr<SlotMarkerWriter> markers_;
  std::unique_ptr<CudaIpcBuffer> buffer_;
  torch::Tensor slot_;
  int64_t version_ = -1;
};

class Source final : public CudaIpcSource {
 public:
  Source(std::string location, const proto::WeightManifest& m, uint64_t stride, double timeout_s,
         std::unique_ptr<SlotMarkerReader> markers, std::unique_ptr<CudaIpcMapping> mapping)
      : location_(std::move(location)),
        m_(m),
        stride_(stride),
        timeout_s_(timeout_s),
        markers_(std::move(markers)),
        mapping_(std::move(mapping)) {}

  const std::string& location() const override { return location_; }
  absl::Status Begin(int64_t version, int64_t buckets) override {
    if (buckets != BucketCount(m_)) {
      return absl::FailedPreconditionError(
          absl::StrCat("the weight stream changed its layout under ", location_));
    }
    RETURN_IF_ERROR(markers_->AwaitVersion(version, timeout_s_));
    // The slot lives on the trainer's GPU, which may not be this engine's: a device without an
    // index lets torch read it from the pointer, and copy_ into the parameters crosses devices.
    slot_ = SlotTensor(mapping_->data(), stride_, version, m_.total_bytes(),
                       torch::Device(torch::kCUDA));
    return absl::OkStatus();
  }
  absl::StatusOr<torch::Tensor> Next(int64_t version, int64_t bucket) override {
    (void)version;
    return BucketOf(slot_, m_, bucket);
  }
  absl::Status Release(int64_t, int64_t) override { return absl::OkStatus(); }
  absl::Status End(int64_t version) override {
    slot_ = torch::Tensor();
    return markers_->CheckStill(version);  // ReadDeviceVersion synchronized the copy
  }

 private:
  std::string location_;
  const proto::WeightManifest m_;
  uint64_t stride_;
  double timeout_s_;
  std::unique_ptr<SlotMarkerReader> markers_;
  std::unique_ptr<CudaIpcMapping> mapping_;
  torch::Tensor slot_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<CudaIpcSink>> CudaIpcSink::Create(const std::string& name,
                                                                 const proto::WeightManifest& m,
                                                                 torch::Device device) {
  if (!device.is_cuda()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weights.transport cuda_ipc exports GPU memory; the trainer is on ", device.str()));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<SlotMarkerWriter> markers, SlotMarkerWriter::Create(name));
  ASSIGN_OR_RETURN(std::unique_ptr<CudaIpcBuffer> buffer,
                   CudaIpcBuffer::Allocate(Index(device), 2 * SlotStride(m)));
  return std::unique_ptr<CudaIpcSink>(new Sink(m, device, std::move(markers), std::move(buffer)));
}

absl::StatusOr<std::unique_ptr<CudaIpcSource>> CudaIpcSource::Open(const std::string& location,
                                                                   const proto::WeightManifest& m,
                                                                   torch::Device device,
                                                                   double timeout_s) {
  const bool prefixed = location.rfind(kCudaIpcPrefix, 0) == 0;
  const std::vector<std::string> parts = absl::StrSplit(
      absl::string_view(location).substr(prefixed ? sizeof(kCudaIpcPrefix) - 1 : 0), ':');
  uint64_t stride = 0;
  if (!prefixed || parts.size() != 3 || !absl::SimpleAtoi(parts[1], &stride) ||
      stride < m.total_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weight location '", location, "' is not cuda-ipc:<segment>:<slot stride>:<handle> ",
        "with slots of at least the manifest's ", m.total_bytes(), " bytes"));
  }
  if (!device.is_cuda()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weights.transport cuda_ipc copies into GPU parameters; the engine is on ", device.str()));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<SlotMarkerReader> markers, SlotMarkerReader::Open(parts[0]));
  ASSIGN_OR_RETURN(std::unique_ptr<CudaIpcMapping> mapping,
                   CudaIpcMapping::Open(parts[2], Index(device)));
  return std::unique_ptr<CudaIpcSource>(
      new Source(location, m, stride, timeout_s, std::move(markers), std::move(mapping)));
}

#else  // a CPU-only libtorch: no tensor is on a GPU, and CUDA IPC is not linked

namespace {
absl::Status NoCuda() {
  return absl::UnimplementedError(
      "weights.transport cuda_ipc: this build has a CPU-only libtorch (build with "
      "-DRLFORGE_CUDA=ON against a CUDA torch)");
}
}  // namespace

absl::StatusOr<std::unique_ptr<CudaIpcSink>> CudaIpcSink::Create(const std::string&,
                                                                 const proto::WeightManifest&,
                                                                 torch::Device) {
  return NoCuda();
}

absl::StatusOr<std::unique_ptr<CudaIpcSource>> CudaIpcSource::Open(const std::string&,
                                                                   const proto::WeightManifest&,
                                                                   torch::Device, double) {
  return NoCuda();
}

#endif

}  // namespace rlforge
