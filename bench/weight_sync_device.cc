// weight_sync_bench --transport cuda_ipc|nccl (bench/weight_sync_device.h).
//
// cuda_ipc: this process (the trainer) holds the model as fp32 tensors on cuda:0 and publishes
//   --reps versions into its CUDA IPC slots; an engine process on the same GPU (this binary
//   re-executed) copies each into its own fp32 tensors. Reported: the publish (pack into the
//   slot), the engine's read (device-to-device copy and widening into its parameters), their
//   sum (a version's sync, the engine waiting on the marker in between), and each against a
//   bare device copy of the stream's bytes (torch copy_ between two buffers, same GPU, same
//   run). The target: the engine's read at >= 80% of the bare copy's rate.
// nccl: the trainer on cuda:0, one engine process on cuda:1, a weight group of 2; a version's
//   sync (first byte packed until the engine unpacked every bucket, closed by a one-float
//   all-reduce) against a bare NCCL broadcast of the same bytes in bucket-sized pieces, two in
//   flight. Needs 2 GPUs: one "skipped" line otherwise.
// Best of --reps; the first version (allocations, NCCL's warm-up) counts like the others.
#include "bench/weight_sync_device.h"

#include <sys/wait.h>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "dist/communicator.h"
#include "weights/cuda_ipc_plane.h"
#include "weights/device_broadcast.h"
#include "weights/device_stream.h"

namespace rlforge {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void Check(const absl::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, std::string(s.message()).c_str());
    std::exit(1);
  }
}

proto::WeightManifest Manifest(const DeviceBenchArgs& a, const std::vector<TensorSpec>& model) {
  return MakeManifest(model, a.dtype, static_cast<uint64_t>(a.bucket_mb * 1048576.0) / 64 * 64);
}

std::vector<std::pair<std::string, torch::Tensor>> Model(const std::vector<TensorSpec>& specs,
                                                         torch::Device device) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const TensorSpec& t : specs) {
    out.push_back({t.name, torch::randn(t.shape, torch::dtype(torch::kFloat32).device(device))});
  }
  return out;
}

absl::Status Publish(const proto::WeightManifest& m, DeviceBucketSink& sink, int64_t version,
                     const std::vector<std::pair<std::string, torch::Tensor>>& model) {
  DeviceBucketWriter w(m, sink, version);
  for (const auto& [name, t] : model) {
    if (absl::Status s = w.Append(name, t); !s.ok()) return s;
  }
  return w.Finish();
}

// The engine process started by the publisher: `line` per version read, to its stdout.
FILE* StartEngine(const DeviceBenchArgs& a, const std::string& where) {
  const std::string cmd =
      absl::StrCat("/proc/", getpid(), "/exe --transport ", a.transport, " --role engine --where '",
                   where, "' --dtype ", a.dtype, " --bucket-mb ", a.bucket_mb, " --reps ", a.reps);
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) std::exit(1);
  return f;
}

double ReadSeconds(FILE* engine) {
  double s = 0;
  if (std::fscanf(engine, "read %lf\n", &s) != 1) {
    std::fprintf(stderr, "the engine process exited early\n");
    std::exit(1);
  }
  return s;
}

// Best of reps of a bare device-to-device copy of `bytes`.
double BareCopySeconds(uint64_t bytes, int reps, torch::Device device) {
  const auto u8 = torch::dtype(torch::kUInt8).device(device);
  torch::Tensor src = torch::empty({static_cast<int64_t>(bytes)}, u8).fill_(1);
  torch::Tensor dst = torch::empty({static_cast<int64_t>(bytes)}, u8);
  double best = 1e30;
  for (int r = 0; r < reps + 1; ++r) {  // one more: the first copy pays for nothing else
    torch::cuda::synchronize();
    const double t0 = Now();
    dst.copy_(src);
    torch::cuda::synchronize();
    if (r > 0) best = std::min(best, Now() - t0);
  }
  return best;
}

int CudaIpcEngine(const DeviceBenchArgs& a, const std::vector<TensorSpec>& specs) {
  const torch::Device device(torch::kCUDA, 0);
  const proto::WeightManifest m = Manifest(a, specs);
  auto named = Model(specs, device);
  auto source = CudaIpcSource::Open(a.where, m, device, 120);
  Check(source.status(), "opening the trainer's CUDA IPC slots");
  auto dest = MatchDeviceDestinations(m, named, "engine");
  Check(dest.status(), "matching the parameters");
  for (int64_t v = 1; v <= a.reps; ++v) {
    Check((*source)->Begin(v, BucketCount(m)), "waiting for a version");  // not timed
    const absl::StatusOr<ReadStats> got = ReadDeviceVersion(m, v, **source, *dest, "engine");
    Check(got.status(), "reading a version");
    std::printf("read %.9f\n", got->seconds);
    std::fflush(stdout);
  }
  return 0;
}

int CudaIpcPublisher(const DeviceBenchArgs& a, const std::vector<TensorSpec>& specs) {
  const torch::Device device(torch::kCUDA, 0);
  const proto::WeightManifest m = Manifest(a, specs);
  const double gb = static_cast<double>(m.total_bytes()) / 1e9;
  auto model = Model(specs, device);
  auto sink = CudaIpcSink::Create(absl::StrCat("/rlforge-bench-ipc-", getpid()), m, device);
  Check(sink.status(), "exporting the CUDA IPC slots");
  FILE* engine = StartEngine(a, (*sink)->location());
  double publish = 1e30, read = 1e30, sync = 1e30;
  for (int64_t v = 1; v <= a.reps; ++v) {
    const double t0 = Now();
    Check(Publish(m, **sink, v, model), "publishing a version");
    const double p = Now() - t0, r = ReadSeconds(engine);
    publish = std::min(publish, p), read = std::min(read, r), sync = std::min(sync, p + r);
  }
  pclose(engine);
  const double bare = BareCopySeconds(m.total_bytes(), a.reps, device);
  std::printf("cuda_ipc, stream %.3f GB (%s), %lld buckets, %d reps, one engine on cuda:0\n", gb,
              a.dtype.c_str(), static_cast<long long>(BucketCount(m)), a.reps);
  std::printf("%-30s %8.4f s %7.1f GB/s\n", "bare device copy (baseline)", bare, gb / bare);
  std::printf("%-30s %8.4f s %7.1f GB/s\n", "publish (pack into the slot)", publish, gb / publish);
  std::printf("%-30s %8.4f s %7.1f GB/s  %.0f%% of the bare copy (target >= 80%%)\n",
              "engine read (slot -> params)", read, gb / read, 100 * bare / read);
  std::printf("%-30s %8.4f s %7.1f GB/s  %.0f%% of the bare copy\n", "version sync (publish+read)",
              sync, gb / sync, 100 * bare / sync);
  return 0;
}

// One rank of the nccl bench's group; rank 0 prints. Each rep: a bare broadcast of the
// stream's bytes, then a version through the plane; each closed by a one-float all-reduce.
int NcclRank(const DeviceBenchArgs& a, const std::vector<TensorSpec>& specs, int rank) {
  const torch::Device device(torch::kCUDA, rank);
  const proto::WeightManifest m = Manifest(a, specs);
  dist::GroupOptions g;
  g.store_address = a.where;
  g.name = "weight-bench";
  g.rank = rank;
  g.size = 2;
  g.timeout_s = 120;
  g.device = device.str();
  auto comm = dist::ConnectGroup(g);
  Check(comm.status(), "forming the NCCL weight group");
  auto model = Model(specs, device);
  auto dest = MatchDeviceDestinations(m, model, "engine");
  Check(dest.status(), "matching the parameters");
  torch::Tensor flag = torch::zeros({1}, torch::dtype(torch::kFloat32).device(device));
  const auto barrier = [&] { Check((*comm)->AllReduceSum(flag)->Wait(), "all-reduce"); };
  DeviceBroadcastSink sink(comm->get(), m.bucket_bytes(), device);
  DeviceBroadcastSource source(comm->get(), m.bucket_bytes(), device);
  torch::Tensor bufs[2];
  for (auto& b : bufs) {
    b = torch::empty({static_cast<int64_t>(m.bucket_bytes())},
                     torch::dtype(torch::kUInt8).device(device));
  }
  double bare = 1e30, plane = 1e30;
  for (int64_t v = 1; v <= a.reps; ++v) {
    barrier();
    double t0 = Now();
    std::unique_ptr<dist::Pending> pending[2];
    for (int64_t b = 0; b < BucketCount(m); ++b) {
      if (pending[b % 2] != nullptr) Check(pending[b % 2]->Wait(), "bare broadcast");
      pending[b % 2] = (*comm)->Broadcast(bufs[b % 2].narrow(0, 0, BucketBytes(m, b)), 0);
    }
    for (auto& p : pending) {
      if (p != nullptr) Check(p->Wait(), "bare broadcast");
    }
    barrier();
    bare = std::min(bare, Now() - t0);
    t0 = Now();
    if (rank == 0) {
      Check(Publish(m, sink, v, model), "publishing a version");
    } else {
      Check(ReadDeviceVersion(m, v, source, *dest, "engine").status(), "reading a version");
    }
    barrier();
    plane = std::min(plane, Now() - t0);
  }
  if (rank != 0) return 0;
  const double gb = static_cast<double>(m.total_bytes()) / 1e9;
  std::printf("nccl, stream %.3f GB (%s), %lld buckets, %d reps, cuda:0 -> cuda:1\n", gb,
              a.dtype.c_str(), static_cast<long long>(BucketCount(m)), a.reps);
  std::printf("%-30s %8.4f s %7.1f GB/s\n", "bare NCCL broadcast (baseline)", bare, gb / bare);
  std::printf("%-30s %8.4f s %7.1f GB/s  %.0f%% of the bare broadcast\n", "version sync (nccl)",
              plane, gb / plane, 100 * bare / plane);
  return 0;
}

int NcclPublisher(const DeviceBenchArgs& a, const std::vector<TensorSpec>& specs) {
  auto store = dist::StoreServer::Start("127.0.0.1");
  Check(store.status(), "starting the store");
  FILE* engine = StartEngine(a, (*store)->address());
  const int rc = NcclRank(a, specs, 0);
  pclose(engine);
  return rc;
}

}  // namespace

int RunDeviceTransportBench(const DeviceBenchArgs& a, const std::vector<TensorSpec>& model) {
  const int gpus = static_cast<int>(torch::cuda::device_count());
  if (a.transport == "cuda_ipc") {
    if (gpus < 1) {
      std::printf("cuda_ipc: skipped: no CUDA device visible to this libtorch\n");
      return 0;
    }
    return a.role == "engine" ? CudaIpcEngine(a, model) : CudaIpcPublisher(a, model);
  }
  if (a.transport == "nccl") {
    if (gpus < 2) {
      std::printf("nccl: skipped: needs 2 GPUs, found %d\n", gpus);
      return 0;
    }
    return a.role == "engine" ? NcclRank(a, model, 1) : NcclPublisher(a, model);
  }
  std::fprintf(stderr, "--transport: expected cuda_ipc or nccl, got '%s'\n", a.transport.c_str());
  return 2;
}

}  // namespace rlforge
