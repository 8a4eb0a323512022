#include "weights/policy_plane.h"

#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/status.h"

namespace rlforge {

namespace {

constexpr char kInline[] = "inline";

// Appends every tensor of `flat` (the manifest's order) to `writer`; every bucket's checksum.
absl::StatusOr<std::vector<uint64_t>> WriteFlat(const proto::WeightManifest& m,
                                                BucketWriter& writer, const float* flat) {
  for (const proto::WeightTensor& t : m.tensors()) {
    const auto numel = static_cast<int64_t>(t.nbytes() / sizeof(float));
    RETURN_IF_ERROR(writer.Append(t.name(), flat, numel));
    flat += numel;
  }
  return writer.Finish();
}

proto::WeightsReady Ready(const proto::WeightManifest& m, int64_t version, uint64_t layout_hash,
                          const std::string& location, const std::vector<uint64_t>& sums) {
  proto::WeightsReady r;
  r.set_version(version);
  r.set_location(location);
  r.set_nbytes(m.total_bytes());
  r.set_layout_hash(layout_hash);
  *r.mutable_manifest() = m;
  for (uint64_t c : sums) r.add_bucket_checksums(c);
  return r;
}

// weights.transport zmq: the stream as one frame through the controller.
class InlinePublisher final : public PolicyPublisher {
 public:
  InlinePublisher(proto::WeightManifest m, uint64_t layout_hash)
      : m_(std::move(m)), layout_hash_(layout_hash) {}
  absl::StatusOr<PublishedWeights> Publish(int64_t version, const float* flat) override {
    PublishedWeights out;
    out.frames.push_back(TensorFrame::Allocate(
        "weights", proto::U8, {static_cast<int64_t>(m_.total_bytes())}));
    MemorySink sink(m_, static_cast<char*>(out.frames.back().data()));
    BucketWriter writer(m_, sink, version);
    ASSIGN_OR_RETURN(const std::vector<uint64_t> sums, WriteFlat(m_, writer, flat));
    out.ready = Ready(m_, version, layout_hash_, kInline, sums);
    return out;
  }

 private:
  proto::WeightManifest m_;
  uint64_t layout_hash_;
};

// weights.transport shm: the segment of two versions (weights/shm_mapped.h).
class MappedPublisher final : public PolicyPublisher {
 public:
  MappedPublisher(proto::WeightManifest m, uint64_t layout_hash, std::unique_ptr<MappedSink> sink)
      : m_(std::move(m)), layout_hash_(layout_hash), sink_(std::move(sink)) {}
  absl::StatusOr<PublishedWeights> Publish(int64_t version, const float* flat) override {
    BucketWriter writer(m_, *sink_, version);
    ASSIGN_OR_RETURN(const std::vector<uint64_t> sums, WriteFlat(m_, writer, flat));
    PublishedWeights out;
    out.ready = Ready(m_, version, layout_hash_, sink_->location(), sums);
    return out;
  }

 private:
  proto::WeightManifest m_;
  uint64_t layout_hash_;
  std::unique_ptr<MappedSink> sink_;
};

}  // namespace

std::vector<TensorSpec> ToTensorSpecs(
    const std::vector<std::pair<std::string, std::vector<int64_t>>>& layout) {
  std::vector<TensorSpec> out;
  for (const auto& [name, shape] : layout) out.push_back({name, shape});
  return out;
}

absl::StatusOr<std::unique_ptr<PolicyPublisher>> MakePolicyPublisher(
    WeightTransport t, const PolicyStreamOptions& o) {
  proto::WeightManifest m = MakeManifest(o.tensors, "float32", o.bucket_bytes);
  switch (t) {
    case WeightTransport::kZmq:
      return std::make_unique<InlinePublisher>(std::move(m), o.layout_hash);
    case WeightTransport::kShm: {
      ASSIGN_OR_RETURN(std::unique_ptr<MappedSink> sink,
                       MappedSink::Create(o.segment, m, o.timeout_s));
      return std::make_unique<MappedPublisher>(std::move(m), o.layout_hash, std::move(sink));
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("weights.transport: ", WeightTransportName(t),
                       " carries no control policy (a rollout worker loads through shm or zmq)"));
  }
}

PolicyReader::PolicyReader(std::string who, std::vector<TensorSpec> tensors, uint64_t layout_hash,
                           double timeout_s)
    : who_(std::move(who)),
      tensors_(std::move(tensors)),
      layout_hash_(layout_hash),
      timeout_s_(timeout_s) {}

PolicyReader::~PolicyReader() = default;

absl::StatusOr<ReadStats> PolicyReader::Read(const proto::WeightsReady& ready,
                                             const std::vector<TensorFrame>& frames, float* flat) {
  if (ready.layout_hash() != layout_hash_) {
    return absl::FailedPreconditionError(absl::StrCat(
        who_, ": weight version ", ready.version(), " is for another model layout: configs differ"));
  }
  std::vector<Destination> mine;
  for (const TensorSpec& t : tensors_) {
    mine.push_back({t.name, t.shape, flat});
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    flat += numel;
  }
  ASSIGN_OR_RETURN(const std::vector<float*> dest, MatchDestinations(ready.manifest(), mine, who_));
  if (ready.location() == kInline) return ReadInline(ready, frames, dest);
  return ReadMapped(ready, dest);
}

absl::StatusOr<ReadStats> PolicyReader::ReadInline(const proto::WeightsReady& ready,
                                                   const std::vector<TensorFrame>& frames,
                                                   const std::vector<float*>& dest) {
  const proto::WeightManifest& m = ready.manifest();
  const TensorFrame* frame = nullptr;
  for (const TensorFrame& f : frames) {
    if (f.name() == "weights") frame = &f;
  }
  if (frame == nullptr || frame->nbytes() != m.total_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        who_, ": inline weight version ", ready.version(), ": no frame 'weights' of ",
        m.total_bytes(), " bytes", frame == nullptr ? "" : absl::StrCat(" (", frame->nbytes(), ")")));
  }
  const std::vector<uint64_t> sums(ready.bucket_checksums().begin(),
                                   ready.bucket_checksums().end());
  MemorySource source(m, static_cast<const char*>(frame->data()), sums);
  return ReadVersion(m, ready.version(), source, dest, who_);
}

// Checks the version in its slot, holds the slot while copying it out, then lets it go.
absl::StatusOr<ReadStats> PolicyReader::ReadMapped(const proto::WeightsReady& ready,
                                                   const std::vector<float*>& dest) {
  if (!absl::StartsWith(ready.location(), "shm-mapped:")) {
    return absl::InvalidArgumentError(
        absl::StrCat(who_, ": weights at '", ready.location(), "', which a control policy's "
                     "rollout worker does not read (shm-mapped or inline)"));
  }
  if (mapped_ == nullptr || location_ != ready.location()) {
    mapped_.reset();  // a new publisher (the trainer was replaced): its own segment
    ASSIGN_OR_RETURN(mapped_, MappedSource::Open(ready.location(), who_, timeout_s_));
    location_ = ready.location();
  }
  const Stopwatch timer;
  ReadStats stats;
  const proto::WeightManifest& m = ready.manifest();
  ASSIGN_OR_RETURN(const char* base, mapped_->Check(m, ready.version(), &stats));
  RETURN_IF_ERROR(mapped_->Hold(ready.version()));
  for (int i = 0; i < m.tensors_size(); ++i) {
    const proto::WeightTensor& t = m.tensors(i);
    std::memcpy(dest[static_cast<size_t>(i)], base + t.offset(), t.nbytes());
  }
  mapped_->Release();
  stats.seconds = timer.Seconds();
  return stats;
}

}  // namespace rlforge
