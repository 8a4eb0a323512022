#include "weights/device_stream.h"

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/exceptions.h"
#include "common/status.h"
#include "config/build_info.h"

#if RLFORGE_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace rlforge {

namespace {

int64_t I64(uint64_t v) { return static_cast<int64_t>(v); }

// Stream bytes [begin, end) of a bucket tensor holding stream bytes from `base`, seen as the
// manifest's dtype.
torch::Tensor WireView(const torch::Tensor& bucket, uint64_t base, const StreamSpan& s,
                       torch::ScalarType wire) {
  return bucket.narrow(0, I64(s.begin - base), I64(s.end - s.begin)).view(wire);
}

// The elements of tensor `t` (flat) that span `s` covers.
torch::Tensor ElementView(const torch::Tensor& flat, const proto::WeightTensor& t,
                          const StreamSpan& s, uint64_t esize) {
  return flat.narrow(0, I64((s.begin - t.offset()) / esize), I64((s.end - s.begin) / esize));
}

}  // namespace

torch::ScalarType WireScalarType(const proto::WeightManifest& m) {
  return m.dtype() == "bfloat16" ? torch::kBFloat16 : torch::kFloat32;
}

void SynchronizeWith(const torch::Tensor& t) {
#if RLFORGE_TORCH_CUDA
  if (t.is_cuda()) c10::cuda::getCurrentCUDAStream(t.device().index()).synchronize();
#else
  (void)t;  // a CPU-only libtorch holds no tensor on a GPU
#endif
}

absl::StatusOr<torch::Tensor> WholeStreamSink::Acquire(int64_t version, int64_t bucket) {
  (void)version;
  return stream_.narrow(0, bucket * I64(m_.bucket_bytes()), I64(BucketBytes(m_, bucket)));
}

absl::StatusOr<torch::Tensor> WholeStreamSource::Next(int64_t version, int64_t bucket) {
  (void)version;
  return stream_.narrow(0, bucket * I64(m_.bucket_bytes()), I64(BucketBytes(m_, bucket)));
}

absl::Status DeviceBucketWriter::Commit() {
  const uint64_t filled = cursor_ - static_cast<uint64_t>(bucket_) * m_.bucket_bytes();
  const int64_t bucket = bucket_;
  bucket_ = -1;
  buf_ = torch::Tensor();
  return sink_.Commit(version_, bucket, filled);
}

absl::Status DeviceBucketWriter::Append(const std::string& name, const torch::Tensor& values) {
  if (next_tensor_ >= m_.tensors_size() || m_.tensors(next_tensor_).name() != name) {
    return absl::InternalError(
        absl::StrCat("weight stream: tensor '", name, "' appended out of the manifest's order"));
  }
  const proto::WeightTensor& t = m_.tensors(next_tensor_++);
  const torch::ScalarType wire = WireScalarType(m_);
  const uint64_t esize = torch::elementSize(wire);
  if (static_cast<uint64_t>(values.numel()) * esize != t.nbytes()) {
    return absl::InternalError(absl::StrCat("weight stream: tensor '", name, "' has ",
                                            values.numel(), " values, the manifest ",
                                            t.nbytes() / esize));
  }
  return CallCatching([&]() -> absl::Status {
    torch::NoGradGuard ng;
    const torch::Tensor flat = values.reshape({-1});
    const uint64_t bb = m_.bucket_bytes();
    while (cursor_ < t.offset() + t.nbytes()) {
      if (bucket_ < 0) {
        bucket_ = I64(cursor_ / bb);
        ASSIGN_OR_RETURN(buf_, sink_.Acquire(version_, bucket_));
      }
      const uint64_t base = static_cast<uint64_t>(bucket_) * bb;
      const StreamSpan s{next_tensor_ - 1, cursor_,
                         std::min(t.offset() + t.nbytes(), base + BucketBytes(m_, bucket_))};
      WireView(buf_, base, s, wire).copy_(ElementView(flat, t, s, esize));  // rounds to bf16
      cursor_ = s.end;
      if (cursor_ == base + BucketBytes(m_, bucket_)) RETURN_IF_ERROR(Commit());
    }
    return absl::OkStatus();
  });
}

absl::Status DeviceBucketWriter::Finish() {
  if (next_tensor_ != m_.tensors_size()) {
    return absl::InternalError(absl::StrCat("weight stream: ", m_.tensors_size() - next_tensor_,
                                            " tensors never appended"));
  }
  if (bucket_ >= 0) RETURN_IF_ERROR(Commit());
  return sink_.Drain();
}

absl::StatusOr<std::vector<torch::Tensor>> MatchDeviceDestinations(
    const proto::WeightManifest& m, const std::vector<std::pair<std::string, torch::Tensor>>& mine,
    const std::string& who) {
  std::vector<TensorSpec> specs;
  for (const auto& [name, t] : mine) specs.push_back({name, t.sizes().vec()});
  ASSIGN_OR_RETURN(const std::vector<size_t> order, MatchOrder(m, specs, who));
  std::vector<torch::Tensor> out;
  for (size_t i : order) {
    if (!mine[i].second.is_contiguous()) {
      return absl::InternalError(
          absl::StrCat(who, ": parameter '", mine[i].first, "' is not contiguous"));
    }
    out.push_back(mine[i].second);
  }
  return out;
}

namespace {

// Unpacks one bucket (stream bytes from `base`) into the destinations.
void UnpackBucket(const proto::WeightManifest& m, const torch::Tensor& bucket, uint64_t base,
                  const std::vector<torch::Tensor>& dest) {
  const torch::ScalarType wire = WireScalarType(m);
  const uint64_t esize = torch::elementSize(wire);
  for (const StreamSpan& s : SpansIn(m, base, base + static_cast<uint64_t>(bucket.numel()))) {
    const torch::Tensor flat = dest[static_cast<size_t>(s.tensor)].view({-1});
    ElementView(flat, m.tensors(s.tensor), s, esize).copy_(WireView(bucket, base, s, wire));
  }
}

absl::Status Failed(const absl::Status& s, const std::string& who, int64_t version,
                    const std::string& where) {
  return absl::Status(s.code(), absl::StrCat(who, " could not load weight version ", version, where,
                                             ": ", s.message()));
}

}  // namespace

absl::StatusOr<ReadStats> ReadDeviceVersion(const proto::WeightManifest& m, int64_t version,
                                            DeviceBucketSource& source,
                                            const std::vector<torch::Tensor>& dest,
                                            const std::string& who) {
  const Stopwatch timer;
  const int64_t count = BucketCount(m);
  ReadStats stats;
  if (absl::Status s = source.Begin(version, count); !s.ok()) return Failed(s, who, version, "");
  for (int64_t b = 0; b < count; ++b) {
    const std::string where = absl::StrCat(": bucket ", b, " of ", count);
    absl::StatusOr<torch::Tensor> got = source.Next(version, b);
    if (!got.ok()) return Failed(got.status(), who, version, where);
    const uint64_t want = BucketBytes(m, b);
    if (static_cast<uint64_t>(got->numel()) != want) {
      return absl::DataLossError(absl::StrCat(who, " refused weight version ", version, where,
                                              " holds ", got->numel(), " bytes, the manifest says ",
                                              want));
    }
    RETURN_IF_ERROR(CallCatching([&]() -> absl::Status {
      torch::NoGradGuard ng;
      UnpackBucket(m, *got, static_cast<uint64_t>(b) * m.bucket_bytes(), dest);
      return absl::OkStatus();
    }));
    if (absl::Status s = source.Release(version, b); !s.ok()) return Failed(s, who, version, where);
    stats.bytes += want;
    ++stats.buckets;
  }
  if (!dest.empty()) SynchronizeWith(dest.front());
  if (absl::Status s = source.End(version); !s.ok()) return Failed(s, who, version, "");
  stats.seconds = timer.Seconds();
  return stats;
}

}  // namespace rlforge
