#include "weights/bucket_stream.h"

#include <emmintrin.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/bfloat16.h"
#include "common/clock.h"
#include "common/status.h"

namespace rlforge {

namespace {

constexpr uint64_t kChunk = 256 << 10;  // bytes hashed (and unpacked) while hot in L2

uint64_t Mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

}  // namespace

// A chunk's hash, fed in pieces: 64 bytes per step into eight independent 64-bit lanes, each
// taking a 32 x 32 -> 64 bit product of its word mixed with a key plus its neighbour's word (the
// accumulate step of xxHash3, written anew): no serial dependency between words, and the
// compiler vectorises it with SSE2's pmuludq, so hashing costs less than moving the bytes.
class ChunkHasher {
 public:
  void Update(const uint8_t* p, uint64_t n) {
    total_ += n;
    if (held_ > 0) {
      const uint64_t take = std::min<uint64_t>(64 - held_, n);
      std::memcpy(hold_ + held_, p, take);
      held_ += take, p += take, n -= take;
      if (held_ < 64) return;
      Stripe(hold_);
      held_ = 0;
    }
    for (; n >= 64; p += 64, n -= 64) Stripe(p);
    std::memcpy(hold_, p, n);
    held_ = n;
  }
  uint64_t Finish() const {
    uint64_t h = total_;
    for (uint64_t l : acc_) h = Mix(h ^ l) * 0x9fb21c651e98df25ull;
    for (uint64_t i = 0; i < held_; ++i) h = (h ^ hold_[i]) * 0x100000001b3ull;
    return Mix(h);
  }
  uint64_t size() const { return total_; }

 private:
  void Stripe(const uint8_t* p) {
    static constexpr uint64_t kKey[8] = {
        0xbe4ba423396cfeb8ull, 0x1cad21f72c81017cull, 0xdb979083e96dd4deull, 0x1f67b3b7a4a44072ull,
        0x78e5c0cc4ee679cbull, 0x2172ffcc7dd05a82ull, 0x8e2443f7744608b8ull, 0x4c263a81e69035e0ull};
    uint64_t w[8];
    std::memcpy(w, p, 64);
    for (int k = 0; k < 8; ++k) {
      const uint64_t x = w[k] ^ kKey[k];
      acc_[k] += (x & 0xffffffffull) * (x >> 32);
      acc_[k ^ 1] += w[k];
    }
  }
  uint64_t acc_[8] = {0x9e3779b97f4a7c15ull, 0xc2b2ae3d27d4eb4full, 0x165667b19e3779f9ull,
                      0x27d4eb2f165667c5ull, 0x85ebca77c2b2ae63ull, 0xff51afd7ed558ccdull,
                      0xc4ceb9fe1a85ec53ull, 0x9fb21c651e98df25ull};
  uint8_t hold_[64];
  uint64_t held_ = 0, total_ = 0;
};

namespace {

uint64_t ChunkHash(const uint8_t* p, uint64_t size) {
  ChunkHasher h;
  h.Update(p, size);
  return h.Finish();
}

// memcpy with non-temporal stores for what is not read again soon (a bucket on its way out, a
// parameter being replaced): no read-for-ownership of the destination, half the memory traffic
// of a cached copy. Fenced, so the bytes are visible before any later release store.
void StreamCopy(void* dst, const void* src, uint64_t n) {
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  if (n < 4096) {
    std::memcpy(d, s, n);
    return;
  }
  const uint64_t head = (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15;
  std::memcpy(d, s, head);
  d += head, s += head, n -= head;
  for (; n >= 64; d += 64, s += 64, n -= 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 48), e);
  }
  std::memcpy(d, s, n);
  _mm_sfence();
}

uint64_t Combine(const std::vector<uint64_t>& chunk_sums, uint64_t size) {
  uint64_t h = Mix(size ^ 0x5bd1e995ull);
  for (uint64_t c : chunk_sums) h = Mix(h ^ c) * 0x100000001b3ull;
  return h;
}

uint64_t ElementSize(const std::string& dtype) { return dtype == "bfloat16" ? 2 : 4; }

void Pack(const float* src, int64_t n, const std::string& dtype, char* dst) {
  if (dtype == "float32") {
    StreamCopy(dst, src, static_cast<uint64_t>(n) * 4);
    return;
  }
  auto* out = reinterpret_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) out[i] = FloatToBf16Bits(src[i]);
}

void Unpack(const char* src, int64_t n, uint64_t esize, float* dst) {
  if (esize == 4) {
    StreamCopy(dst, src, static_cast<uint64_t>(n) * 4);
    return;
  }
  const auto* in = reinterpret_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = Bf16BitsToFloat(in[i]);
}

// Copies stream bytes [lo, hi), found at `data` (stream offset `lo`), into the tensors.
void UnpackRange(const proto::WeightManifest& m, uint64_t lo, uint64_t hi, const char* data,
                 const std::vector<float*>& dest, uint64_t esize) {
  for (const StreamSpan& s : SpansIn(m, lo, hi)) {
    const uint64_t offset = m.tensors(s.tensor).offset();
    Unpack(data + (s.begin - lo), static_cast<int64_t>((s.end - s.begin) / esize), esize,
           dest[static_cast<size_t>(s.tensor)] + (s.begin - offset) / esize);
  }
}

}  // namespace

std::vector<StreamSpan> SpansIn(const proto::WeightManifest& m, uint64_t lo, uint64_t hi) {
  const auto& ts = m.tensors();
  // The last tensor starting at or before lo.
  auto it =
      std::upper_bound(ts.begin(), ts.end(), lo,
                       [](uint64_t v, const proto::WeightTensor& t) { return v < t.offset(); });
  std::vector<StreamSpan> out;
  for (int i = static_cast<int>(std::max<ptrdiff_t>(0, (it - ts.begin()) - 1));
       i < ts.size() && ts[i].offset() < hi; ++i) {
    const uint64_t a = std::max(lo, ts[i].offset());
    const uint64_t b = std::min(hi, ts[i].offset() + ts[i].nbytes());
    if (a < b) out.push_back({i, a, b});
  }
  return out;
}

uint64_t BucketChecksum(const void* data, uint64_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  std::vector<uint64_t> sums;
  for (uint64_t at = 0; at < size; at += kChunk)
    sums.push_back(ChunkHash(p + at, std::min(kChunk, size - at)));
  return Combine(sums, size);
}

proto::WeightManifest MakeManifest(const std::vector<TensorSpec>& tensors, const std::string& dtype,
                                   uint64_t bucket_bytes) {
  proto::WeightManifest m;
  m.set_dtype(dtype);
  m.set_bucket_bytes(bucket_bytes);
  uint64_t offset = 0;
  for (const TensorSpec& t : tensors) {
    proto::WeightTensor* w = m.add_tensors();
    w->set_name(t.name);
    int64_t numel = 1;
    for (int64_t d : t.shape) {
      w->add_shape(d);
      numel *= d;
    }
    w->set_offset(offset);
    w->set_nbytes(static_cast<uint64_t>(numel) * ElementSize(dtype));
    offset += w->nbytes();
  }
  m.set_total_bytes(offset);
  m.set_bucket_bytes(std::max<uint64_t>(64, std::min(bucket_bytes, (offset + 63) / 64 * 64)));
  return m;
}

int64_t BucketCount(const proto::WeightManifest& m) {
  return static_cast<int64_t>((m.total_bytes() + m.bucket_bytes() - 1) / m.bucket_bytes());
}

uint64_t BucketBytes(const proto::WeightManifest& m, int64_t bucket) {
  const uint64_t begin = static_cast<uint64_t>(bucket) * m.bucket_bytes();
  return std::min(m.bucket_bytes(), m.total_bytes() - begin);
}

absl::StatusOr<std::vector<size_t>> MatchOrder(const proto::WeightManifest& m,
                                               const std::vector<TensorSpec>& mine,
                                               const std::string& who) {
  if (m.dtype() != "float32" && m.dtype() != "bfloat16") {
    return absl::InvalidArgumentError(absl::StrCat(who, ": the weight stream's dtype '", m.dtype(),
                                                   "' is not float32 or bfloat16"));
  }
  if (m.bucket_bytes() == 0 || m.bucket_bytes() % 64 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": bucket size ", m.bucket_bytes(), " is not a positive multiple of 64"));
  }
  std::map<std::string, size_t> by_name;
  for (size_t i = 0; i < mine.size(); ++i) by_name[mine[i].name] = i;
  std::vector<size_t> out;
  for (const proto::WeightTensor& t : m.tensors()) {
    auto it = by_name.find(t.name());
    if (it == by_name.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat(who, ": the weight stream has tensor '", t.name(),
                       "' that this model does not (trainer and rollout load different models)"));
    }
    const std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
    if (shape != mine[it->second].shape) {
      return absl::FailedPreconditionError(absl::StrCat(
          who, ": tensor '", t.name(), "' is [", absl::StrJoin(shape, ", "),
          "] in the stream but [", absl::StrJoin(mine[it->second].shape, ", "), "] in this model"));
    }
    out.push_back(it->second);
    by_name.erase(it);
  }
  if (!by_name.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(who, ": this model's tensor '", by_name.begin()->first,
                     "' is not in the weight stream (trainer and rollout load different models)"));
  }
  return out;
}

absl::StatusOr<std::vector<float*>> MatchDestinations(const proto::WeightManifest& m,
                                                      const std::vector<Destination>& mine,
                                                      const std::string& who) {
  std::vector<TensorSpec> specs;
  for (const Destination& d : mine) specs.push_back({d.name, d.shape});
  ASSIGN_OR_RETURN(const std::vector<size_t> order, MatchOrder(m, specs, who));
  std::vector<float*> out;
  for (size_t i : order) out.push_back(mine[i].data);
  return out;
}

absl::StatusOr<char*> MemorySink::Acquire(int64_t version, int64_t bucket) {
  (void)version;
  return stream_ + static_cast<uint64_t>(bucket) * m_.bucket_bytes();
}

absl::StatusOr<BucketSource::Bucket> MemorySource::Next(int64_t version, int64_t bucket) {
  (void)version;
  if (bucket >= static_cast<int64_t>(checksums_.size())) {
    return absl::DataLossError(absl::StrCat("no checksum was published for bucket ", bucket));
  }
  return Bucket{stream_ + static_cast<uint64_t>(bucket) * m_.bucket_bytes(),
                BucketBytes(m_, bucket), checksums_[static_cast<size_t>(bucket)]};
}

BucketWriter::BucketWriter(const proto::WeightManifest& m, BucketSink& sink, int64_t version)
    : m_(m),
      sink_(sink),
      version_(version),
      esize_(ElementSize(m.dtype())),
      chunk_(std::make_unique<ChunkHasher>()) {}

BucketWriter::~BucketWriter() = default;

absl::Status BucketWriter::Open() {
  bucket_ = static_cast<int64_t>(cursor_ / m_.bucket_bytes());
  absl::StatusOr<char*> buf = sink_.Acquire(version_, bucket_);
  if (!buf.ok()) return buf.status();
  buf_ = *buf;
  chunk_sums_.clear();
  return absl::OkStatus();
}

absl::Status BucketWriter::Commit() {
  if (chunk_->size() > 0) chunk_sums_.push_back(chunk_->Finish());
  *chunk_ = ChunkHasher();
  const uint64_t filled = cursor_ - static_cast<uint64_t>(bucket_) * m_.bucket_bytes();
  const uint64_t sum = Combine(chunk_sums_, filled);
  sums_.push_back(sum);
  const int64_t bucket = bucket_;
  bucket_ = -1;
  return sink_.Commit(version_, bucket, filled, sum);
}

absl::Status BucketWriter::Append(const std::string& name, const float* data, int64_t numel) {
  if (next_tensor_ >= static_cast<size_t>(m_.tensors_size()) ||
      m_.tensors(static_cast<int>(next_tensor_)).name() != name) {
    return absl::InternalError(
        absl::StrCat("weight stream: tensor '", name, "' appended out of the manifest's order"));
  }
  const proto::WeightTensor& t = m_.tensors(static_cast<int>(next_tensor_++));
  if (static_cast<uint64_t>(numel) * esize_ != t.nbytes()) {
    return absl::InternalError(absl::StrCat("weight stream: tensor '", name, "' has ", numel,
                                            " values, the manifest ", t.nbytes() / esize_));
  }
  const uint64_t bucket_bytes = m_.bucket_bytes();
  for (int64_t done = 0; done < numel;) {
    if (bucket_ < 0) {
      if (absl::Status s = Open(); !s.ok()) return s;
    }
    // Up to the end of the hash chunk: hashed while its bytes are in cache.
    const uint64_t at = cursor_ - static_cast<uint64_t>(bucket_) * bucket_bytes;
    const uint64_t chunk_end = std::min((at / kChunk + 1) * kChunk, bucket_bytes);
    const int64_t n =
        std::min<int64_t>(numel - done, static_cast<int64_t>((chunk_end - at) / esize_));
    const auto* wire = reinterpret_cast<const uint8_t*>(data + done);  // fp32: the source bytes
    if (esize_ == 4) chunk_->Update(wire, static_cast<uint64_t>(n) * 4);
    Pack(data + done, n, m_.dtype(), buf_ + at);
    if (esize_ == 2) chunk_->Update(reinterpret_cast<const uint8_t*>(buf_ + at), n * 2ull);
    done += n;
    cursor_ += static_cast<uint64_t>(n) * esize_;
    if (cursor_ - static_cast<uint64_t>(bucket_) * bucket_bytes == chunk_end) {
      chunk_sums_.push_back(chunk_->Finish());
      *chunk_ = ChunkHasher();
    }
    if (chunk_end == bucket_bytes && at + static_cast<uint64_t>(n) * esize_ == chunk_end) {
      if (absl::Status s = Commit(); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint64_t>> BucketWriter::Finish() {
  if (next_tensor_ != static_cast<size_t>(m_.tensors_size())) {
    return absl::InternalError(absl::StrCat("weight stream: ", m_.tensors_size() - next_tensor_,
                                            " tensors never appended"));
  }
  if (bucket_ >= 0) {
    if (absl::Status s = Commit(); !s.ok()) return s;
  }
  if (absl::Status s = sink_.Drain(); !s.ok()) return s;
  return sums_;
}

absl::StatusOr<ReadStats> ReadVersion(const proto::WeightManifest& m, int64_t version,
                                      BucketSource& source, const std::vector<float*>& dest,
                                      const std::string& who) {
  const Stopwatch timer;
  const uint64_t esize = ElementSize(m.dtype());
  const int64_t count = BucketCount(m);
  ReadStats stats;
  if (absl::Status s = source.Begin(version, count); !s.ok()) {
    return absl::Status(
        s.code(), absl::StrCat(who, " could not load weight version ", version, ": ", s.message()));
  }
  for (int64_t b = 0; b < count; ++b) {
    absl::StatusOr<BucketSource::Bucket> got = source.Next(version, b);
    if (!got.ok()) {
      return absl::Status(got.status().code(),
                          absl::StrCat(who, " could not load weight version ", version, ": bucket ",
                                       b, " of ", count, ": ", got.status().message()));
    }
    const uint64_t want = BucketBytes(m, b);
    if (got->nbytes != want) {
      return absl::DataLossError(absl::StrCat(who, " refused weight version ", version, ": bucket ",
                                              b, " of ", count, " holds ", got->nbytes,
                                              " bytes, the manifest says ", want));
    }
    const uint64_t base = static_cast<uint64_t>(b) * m.bucket_bytes();
    std::vector<uint64_t> sums;
    for (uint64_t at = 0; at < want; at += kChunk) {
      const uint64_t n = std::min(kChunk, want - at);
      sums.push_back(ChunkHash(reinterpret_cast<const uint8_t*>(got->data + at), n));
      UnpackRange(m, base + at, base + at + n, got->data + at, dest, esize);
    }
    const uint64_t sum = Combine(sums, want);
    if (sum != got->checksum) {
      return absl::DataLossError(absl::StrCat(who, " refused weight version ", version, ": bucket ",
                                              b, " of ", count, " failed its checksum (", sum,
                                              " read, ", got->checksum, " published)"));
    }
    if (absl::Status s = source.Release(version, b); !s.ok()) return s;
    stats.bytes += want;
    ++stats.buckets;
  }
  stats.seconds = timer.Seconds();
  return stats;
}

}  // namespace rlforge
