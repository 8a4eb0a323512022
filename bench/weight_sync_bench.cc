// weight_sync_bench: the weight plane at Qwen2.5-0.5B's size, published by this process to
// engine processes on this host over the shared-memory ring, the mapped segment (engines serve
// from it: weights.apply mapped) and the gloo broadcast group, against memcpy of the same bytes
// and a bare c10d gloo broadcast, measured in the same run.
//
//   build/bench/weight_sync_bench [--dtype float32|bfloat16] [--bucket-mb 256] [--engines 2]
//                                 [--reps 3] [--paths shm,mapped,...]
//   build/bench/weight_sync_bench --transport cuda_ipc|nccl [--dtype ...] [--bucket-mb ...]
//                                 [--reps 3]   (the GPU transports: bench/weight_sync_device.h)
//
// The weight set: Qwen2.5-0.5B's config (vocab 151936, hidden 896, 24 layers, 14 heads, 2 KV
// heads, MLP 4864, tied embeddings, q/k/v biases), random values: 494M parameters, 1.98 GB in
// fp32 and 0.99 GB in bf16 on the wire. The publisher holds them as fp32 tensors; each engine is
// this binary re-executed (a fresh process, so no page is shared by fork) holding its own fp32
// copy to write into. A rep times one version from the first byte packed until every engine
// has verified and unpacked every bucket (mapped: verified every bucket in place and pointed
// its tensors into the segment, its own copy freed at the first version); the best of --reps.
//
// Baselines, in the same run: memcpy of the stream's bytes (one thread, in a process of its
// own), and a bare gloo broadcast of the same bytes in bucket-sized pieces, two in flight
// (no packing, no checksum). Peak RSS (VmHWM) of every process is reported against its model
// plus two buckets, above what the process held before its model (the runtime's own). Shared
// pages a process touched count in its RSS: a mapped engine's RSS holds the segment's slots it
// read, which every engine shares; its RssAnon (private memory) at the end is reported beside.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "bench/weight_sync_device.h"
#include "dist/communicator.h"
#include "weights/bucket_stream.h"
#include "weights/gloo_plane.h"
#include "weights/shm_mapped.h"
#include "weights/shm_ring.h"

extern char** environ;

namespace rlforge {
namespace {

struct Args {
  std::string role = "publisher";  // publisher | engine | memcpy
  std::string path;                // engine: shm | mapped | gloo | bare
  std::string where;               // engine: ring location or store address
  std::string dtype = "float32";
  double bucket_mb = 256;
  int engines = 2;
  int rank = 0;
  int reps = 3;
  std::string paths = "shm,mapped,mapped-windows,bare,gloo";  // publisher: which paths to run
  std::string transport;  // cuda_ipc | nccl: the GPU transports' bench instead
};

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A field of /proc/self/status in MB: "VmHWM" (peak RSS), "RssAnon", "RssShmem".
double StatusMb(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stod(line.substr(field.size() + 1)) / 1024;
  }
  return 0;
}

double PeakRssMb() { return StatusMb("VmHWM"); }

std::vector<TensorSpec> Qwen05B() {
  const int64_t h = 896, kv = 128, mlp = 4864, vocab = 151936;
  std::vector<TensorSpec> s = {{"model.embed_tokens.weight", {vocab, h}}};
  for (int l = 0; l < 24; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    s.push_back({p + "self_attn.q_proj.weight", {h, h}});
    s.push_back({p + "self_attn.q_proj.bias", {h}});
    s.push_back({p + "self_attn.k_proj.weight", {kv, h}});
    s.push_back({p + "self_attn.k_proj.bias", {kv}});
    s.push_back({p + "self_attn.v_proj.weight", {kv, h}});
    s.push_back({p + "self_attn.v_proj.bias", {kv}});
    s.push_back({p + "self_attn.o_proj.weight", {h, h}});
    s.push_back({p + "mlp.gate_proj.weight", {mlp, h}});
    s.push_back({p + "mlp.up_proj.weight", {mlp, h}});
    s.push_back({p + "mlp.down_proj.weight", {h, mlp}});
    s.push_back({p + "input_layernorm.weight", {h}});
    s.push_back({p + "post_attention_layernorm.weight", {h}});
  }
  s.push_back({"model.norm.weight", {h}});
  return s;
}

int64_t Numel(const TensorSpec& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  return n;
}

// Every tensor in one allocation, filled with a cheap pseudo-random pattern.
struct Weights {
  std::vector<float> flat;
  std::vector<Destination> dest;
  Weights(const std::vector<TensorSpec>& specs, uint64_t seed) {
    int64_t total = 0;
    for (const auto& t : specs) total += Numel(t);
    flat.resize(static_cast<size_t>(total));
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (float& f : flat) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      f = static_cast<float>(static_cast<int32_t>(x >> 40) - (1 << 23)) / (1 << 26);
    }
    float* p = flat.data();
    for (const auto& t : specs) {
      dest.push_back({t.name, t.shape, p});
      p += Numel(t);
    }
  }
};

proto::WeightManifest Manifest(const Args& a) {
  return MakeManifest(Qwen05B(), a.dtype, static_cast<uint64_t>(a.bucket_mb * 1048576.0) / 64 * 64);
}

void Check(const absl::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, std::string(s.message()).c_str());
    std::exit(1);
  }
}

// --- engine processes: one path each, --reps versions, "<seconds> <rss_before> <peak>" out.

absl::Status BareReceive(dist::Communicator& comm, const proto::WeightManifest& m) {
  torch::Tensor buf[2];
  for (auto& b : buf) b = torch::empty({static_cast<int64_t>(m.bucket_bytes())}, torch::kUInt8);
  std::unique_ptr<dist::Pending> p[2];
  for (int64_t b = 0; b < BucketCount(m); ++b) {
    if (p[b % 2]) {
      if (absl::Status s = p[b % 2]->Wait(); !s.ok()) return s;
    }
    p[b % 2] = comm.Broadcast(buf[b % 2], 0);
  }
  for (auto& q : p) {
    if (q) {
      if (absl::Status s = q->Wait(); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

// An engine serving from the mapped segment: each version checked in place, then its tensors
// pointed at it; its own copy (what it served before the first version) freed then.
void RunMappedEngine(const Args& a, const proto::WeightManifest& m, Weights& mine, double before) {
  auto source = MappedSource::Open(a.where, "engine-" + std::to_string(a.rank), 600);
  Check(source.status(), "mapped");
  std::vector<const float*> serving;
  for (const Destination& d : mine.dest) serving.push_back(d.data);
  for (int r = 1; r <= a.reps; ++r) {
    ReadStats stats;
    auto base = (*source)->Check(m, r, &stats);
    Check(base.status(), "check");
    Check((*source)->Hold(r), "hold");
    for (int i = 0; i < m.tensors_size(); ++i) {
      serving[static_cast<size_t>(i)] =
          reinterpret_cast<const float*>(*base + m.tensors(i).offset());
    }
    (*source)->Serve(r);
    if (!mine.flat.empty()) std::vector<float>().swap(mine.flat);
    std::printf("done %d\n", r);
    std::fflush(stdout);
  }
  std::printf("served %g\n", static_cast<double>(serving.back()[0]));  // keep them observable
  // While the segment is still mapped: its pages count in RssShmem.
  std::printf("rss %.0f %.0f %.0f %.0f\n", before, PeakRssMb(), StatusMb("RssAnon"),
              StatusMb("RssShmem"));
  std::fflush(stdout);
}

int RunEngine(const Args& a) {
  const double before = PeakRssMb();
  const proto::WeightManifest m = Manifest(a);
  Weights mine(Qwen05B(), 100 + a.rank);
  auto dest = MatchDestinations(m, mine.dest, "engine");
  Check(dest.status(), "manifest");
  std::unique_ptr<BucketSource> source;
  ShmRingSource* ring = nullptr;  // source, on the ring
  std::unique_ptr<dist::Communicator> comm;
  if (a.path.rfind("mapped", 0) == 0) {
    RunMappedEngine(a, m, mine, before);
    return 0;
  }
  if (a.path == "shm") {
    auto s = ShmRingSource::Open(a.where, 600);
    Check(s.status(), "ring");
    ring = s->get();
    source = std::move(*s);
  } else {
    dist::GroupOptions g{a.where, kWeightGroup, a.rank, a.engines + 1, 600};
    auto c = dist::ConnectGroup(g);
    Check(c.status(), "group");
    comm = std::move(*c);
    if (a.path == "gloo")
      source = std::make_unique<GlooBroadcastSource>(comm.get(), m.bucket_bytes());
  }
  for (int r = 1; r <= a.reps; ++r) {
    if (a.path == "bare") {
      Check(BareReceive(*comm, m), "bare broadcast");
    } else {
      // One stream per version here; engines are ranks 1..engines, readers 0..engines-1.
      if (ring != nullptr) ring->set_publication(r, a.rank - 1);
      Check(ReadVersion(m, r, *source, *dest, "engine").status(), "read");
    }
    std::printf("done %d\n", r);
    std::fflush(stdout);
  }
  std::printf("rss %.0f %.0f %.0f %.0f\n", before, PeakRssMb(), StatusMb("RssAnon"),
              StatusMb("RssShmem"));
  std::fflush(stdout);
  return 0;
}

// The baseline, and each side's own cost with no transport: packing (with the checksum) into
// one buffer, and checking and unpacking from it.
int RunMemcpy(const Args& a) {
  const proto::WeightManifest m = Manifest(a);
  std::vector<char> src(m.total_bytes(), 1), dst(m.total_bytes(), 2);
  double best = 1e30;
  for (int r = 0; r < a.reps; ++r) {
    const double t0 = Now();
    std::memcpy(dst.data(), src.data(), src.size());
    best = std::min(best, Now() - t0);
    src[static_cast<size_t>(r)] = dst[static_cast<size_t>(r) + 1];  // keep the copy observable
  }
  src = {};
  Weights w(Qwen05B(), 7), engine(Qwen05B(), 8);
  auto dest = MatchDestinations(m, engine.dest, "engine");
  Check(dest.status(), "manifest");
  double pack = 1e30, unpack = 1e30, check = 1e30;
  for (int r = 1; r <= a.reps; ++r) {
    MemorySink sink(m, dst.data());
    BucketWriter writer(m, sink, r);
    double t0 = Now();
    for (const Destination& d : w.dest) {
      int64_t n = 1;
      for (int64_t x : d.shape) n *= x;
      Check(writer.Append(d.name, d.data, n), "append");
    }
    auto sums = writer.Finish();
    Check(sums.status(), "finish");
    pack = std::min(pack, Now() - t0);
    MemorySource source(m, dst.data(), *sums);
    t0 = Now();
    Check(ReadVersion(m, r, source, *dest, "engine").status(), "read");
    unpack = std::min(unpack, Now() - t0);
    t0 = Now();  // what a mapped engine does: every bucket's checksum, in place
    for (int64_t b = 0; b < BucketCount(m); ++b) {
      const uint64_t got = BucketChecksum(dst.data() + static_cast<uint64_t>(b) * m.bucket_bytes(),
                                          BucketBytes(m, b));
      if (got != (*sums)[static_cast<size_t>(b)]) Check(absl::DataLossError("checksum"), "check");
    }
    check = std::min(check, Now() - t0);
  }
  std::printf("best %.6f %.6f %.6f %.6f\n", best, pack, unpack, check);
  return 0;
}

// --- the publisher.

struct Child {
  pid_t pid = 0;
  FILE* out = nullptr;
};

Child Spawn(const Args& a, const std::string& role, const std::string& path,
            const std::string& where, int rank) {
  std::vector<std::string> argv = {"/proc/self/exe",
                                   "--role",
                                   role,
                                   "--path",
                                   path,
                                   "--where",
                                   where,
                                   "--dtype",
                                   a.dtype,
                                   "--bucket-mb",
                                   std::to_string(a.bucket_mb),
                                   "--engines",
                                   std::to_string(a.engines),
                                   "--rank",
                                   std::to_string(rank),
                                   "--reps",
                                   std::to_string(a.reps)};
  std::vector<char*> cargv;
  for (auto& s : argv) cargv.push_back(s.data());
  cargv.push_back(nullptr);
  int fds[2];
  if (pipe(fds) != 0) std::exit(1);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  Child c;
  if (posix_spawn(&c.pid, "/proc/self/exe", &fa, nullptr, cargv.data(), environ) != 0) {
    std::exit(1);
  }
  close(fds[1]);
  c.out = fdopen(fds[0], "r");
  return c;
}

std::string ReadLine(Child& c) {
  char buf[256];
  if (std::fgets(buf, sizeof buf, c.out) == nullptr) {
    std::fprintf(stderr, "an engine process exited early\n");
    std::exit(1);
  }
  return buf;
}

struct PathResult {
  double seconds = 1e30;
  double rss_before = 0, rss_peak = 0;            // the publisher's, MB
  std::vector<double> engine_rss;                 // each engine's peak above its start, MB
  std::vector<double> engine_anon, engine_shmem;  // each engine's RssAnon, RssShmem at the end
};

// One path: spawn the engines, publish --reps versions, time each until all engines are done.
PathResult RunPath(const Args& a, const std::string& path, Weights& w,
                   const proto::WeightManifest& m) {
  PathResult out;
  std::unique_ptr<ShmRingSink> ring;
  std::unique_ptr<MappedSink> mapped;
  std::unique_ptr<dist::StoreServer> store;
  std::string where;
  if (path.rfind("mapped", 0) == 0) {
    auto s = MappedSink::Create("/rlforge-bench-m-" + std::to_string(getpid()), m, 600,
                                path == "mapped" ? MappedSink::Mapping::kWholeSegment
                                                 : MappedSink::Mapping::kBucketWindows);
    Check(s.status(), "mapped");
    mapped = std::move(*s);
    where = mapped->location();
  } else if (path == "shm") {
    auto r =
        ShmRingSink::Create("/rlforge-bench-" + std::to_string(getpid()), m.bucket_bytes(), 600);
    Check(r.status(), "ring");
    ring = std::move(*r);
    where = ring->location();
  } else {
    auto s = dist::StoreServer::Start("127.0.0.1");
    Check(s.status(), "store");
    store = std::move(*s);
    where = store->address();
  }
  std::vector<Child> engines;
  for (int e = 1; e <= a.engines; ++e) engines.push_back(Spawn(a, "engine", path, where, e));
  std::unique_ptr<dist::Communicator> comm;
  std::unique_ptr<GlooBroadcastSink> gloo;
  if (path == "bare" || path == "gloo") {
    auto c = dist::ConnectGroup({where, kWeightGroup, 0, a.engines + 1, 600});
    Check(c.status(), "group");
    comm = std::move(*c);
    if (path == "gloo") gloo = std::make_unique<GlooBroadcastSink>(comm.get(), m.bucket_bytes());
  }
  torch::Tensor bare[2];
  if (path == "bare") {
    for (auto& b : bare) b = torch::empty({static_cast<int64_t>(m.bucket_bytes())}, torch::kUInt8);
  }
  for (int r = 1; r <= a.reps; ++r) {
    const double t0 = Now();
    if (path == "bare") {
      std::unique_ptr<dist::Pending> p[2];
      for (int64_t b = 0; b < BucketCount(m); ++b) {
        if (p[b % 2]) Check(p[b % 2]->Wait(), "bare");
        p[b % 2] = comm->Broadcast(bare[b % 2], 0);
      }
      for (auto& q : p) Check(q->Wait(), "bare");
    } else {
      BucketSink& sink = ring     ? static_cast<BucketSink&>(*ring)
                         : mapped ? static_cast<BucketSink&>(*mapped)
                                  : *gloo;
      if (ring) Check(ring->BeginPublication(r, a.engines), "publication");
      BucketWriter writer(m, sink, r);
      for (const Destination& d : w.dest) {
        int64_t n = 1;
        for (int64_t x : d.shape) n *= x;
        Check(writer.Append(d.name, d.data, n), "append");
      }
      Check(writer.Finish().status(), "finish");
    }
    for (Child& c : engines) ReadLine(c);  // "done r"
    out.seconds = std::min(out.seconds, Now() - t0);
  }
  for (Child& c : engines) {
    double before = 0, peak = 0, anon = 0, shmem = 0;
    std::string line = ReadLine(c);
    if (line.rfind("served", 0) == 0) line = ReadLine(c);
    std::sscanf(line.c_str(), "rss %lf %lf %lf %lf", &before, &peak, &anon, &shmem);
    out.engine_rss.push_back(peak - before);
    out.engine_anon.push_back(anon);
    out.engine_shmem.push_back(shmem);
    waitpid(c.pid, nullptr, 0);
  }
  return out;
}

int RunPublisher(const Args& a) {
  const double rss0 = PeakRssMb();
  const proto::WeightManifest m = Manifest(a);
  const double gb = static_cast<double>(m.total_bytes()) / 1e9;
  Weights w(Qwen05B(), 7);
  const double model_mb = static_cast<double>(w.flat.size()) * 4 / 1048576;
  const double buckets_mb = 2.0 * static_cast<double>(m.bucket_bytes()) / 1048576;
  std::printf(
      "weights: %zu parameters, stream %.3f GB (%s), %lld buckets of %.0f MiB, %d engines\n",
      w.flat.size(), gb, a.dtype.c_str(), static_cast<long long>(BucketCount(m)),
      static_cast<double>(m.bucket_bytes()) / 1048576, a.engines);
  Child mc = Spawn(a, "memcpy", "-", "-", 0);
  double memcpy_s = 0, pack_s = 0, unpack_s = 0, check_s = 0;
  std::sscanf(ReadLine(mc).c_str(), "best %lf %lf %lf %lf", &memcpy_s, &pack_s, &unpack_s,
              &check_s);
  waitpid(mc.pid, nullptr, 0);
  std::printf("%-22s %8.3f s %7.2f GB/s\n", "memcpy (baseline)", memcpy_s, gb / memcpy_s);
  std::printf("%-22s %8.3f s %7.2f GB/s\n", "pack alone", pack_s, gb / pack_s);
  std::printf("%-22s %8.3f s %7.2f GB/s\n", "check+unpack alone", unpack_s, gb / unpack_s);
  std::printf("%-22s %8.3f s %7.2f GB/s\n", "check alone", check_s, gb / check_s);
  double bare_s = 0;
  for (const std::string path : {"shm", "mapped", "mapped-windows", "bare", "gloo"}) {
    if (("," + a.paths + ",").find("," + path + ",") == std::string::npos) continue;
    if (path.rfind("mapped", 0) == 0 && a.dtype != "float32") {
      std::printf("%-22s fp32 on the wire only (weights.apply mapped)\n", "mapped segment");
      continue;
    }
    PathResult r = RunPath(a, path, w, m);
    const char* name = path == "shm"              ? "shm ring"
                       : path == "mapped"         ? "mapped segment"
                       : path == "mapped-windows" ? "mapped, bucket windows"
                       : path == "bare"           ? "bare gloo broadcast"
                                                  : "gloo plane";
    std::printf("%-22s %8.3f s %7.2f GB/s", name, r.seconds, gb / r.seconds);
    if (path == "shm" || path.rfind("mapped", 0) == 0)
      std::printf("  %.2fx memcpy", memcpy_s / r.seconds);
    if (path == "bare") bare_s = r.seconds;
    if (path == "gloo") std::printf("  %.2fx bare broadcast", bare_s / r.seconds);
    std::printf("  engine peak RSS above start:");
    for (double e : r.engine_rss) std::printf(" %.0f", e);
    std::printf(" MB (model + 2 buckets = %.0f MB)\n", model_mb + buckets_mb);
    if (path.rfind("mapped", 0) == 0) {
      std::printf("%-22s engines at the end, RssAnon / RssShmem:", "");
      for (size_t e = 0; e < r.engine_anon.size(); ++e) {
        std::printf(" %.0f / %.0f", r.engine_anon[e], r.engine_shmem[e]);
      }
      std::printf(" MB (the segment: 2 versions, shared by every engine)\n");
    }
  }
  std::printf("publisher peak RSS above start: %.0f MB (model + 2 buckets = %.0f MB)\n",
              PeakRssMb() - rss0, model_mb + buckets_mb);
  return 0;
}

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--role")
      a.role = v;
    else if (k == "--path")
      a.path = v;
    else if (k == "--where")
      a.where = v;
    else if (k == "--dtype")
      a.dtype = v;
    else if (k == "--bucket-mb")
      a.bucket_mb = std::stod(v);
    else if (k == "--engines")
      a.engines = std::stoi(v);
    else if (k == "--rank")
      a.rank = std::stoi(v);
    else if (k == "--reps")
      a.reps = std::stoi(v);
    else if (k == "--paths")
      a.paths = v;
    else if (k == "--transport")
      a.transport = v;
    else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      std::exit(2);
    }
  }
  return a;
}

}  // namespace
}  // namespace rlforge

int main(int argc, char** argv) {
  const rlforge::Args a = rlforge::Parse(argc, argv);
  torch::set_num_threads(1);
  if (!a.transport.empty()) {
    const rlforge::DeviceBenchArgs d{a.transport, a.role, a.where, a.dtype, a.bucket_mb, a.reps};
    return rlforge::RunDeviceTransportBench(d, rlforge::Qwen05B());
  }
  if (a.role == "engine") return rlforge::RunEngine(a);
  if (a.role == "memcpy") return rlforge::RunMemcpy(a);
  return rlforge::RunPublisher(a);
}
