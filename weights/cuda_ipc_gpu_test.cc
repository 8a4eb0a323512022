// The cuda_ipc transport between two processes on one GPU: this test binary publishes, and
// re-executes itself as the engine (RLFORGE_CUDA_IPC_ENGINE set: it serves one read and exits
// before the tests run), so the engine's CUDA context is its own, as a real engine's is. Skips,
// saying why, with a CPU-only libtorch or without a GPU.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <torch/cuda.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "config/build_info.h"
#include "weights/cuda_ipc_plane.h"

extern char** environ;

namespace rlforge {
namespace {

const std::vector<TensorSpec> kSpecs = {
    {"embed", {1000, 33}}, {"layer.0.w", {77, 13}}, {"head", {5}}};

// Version v's values, on the CPU (each side makes them itself).
std::vector<torch::Tensor> Values(int64_t v) {
  torch::manual_seed(static_cast<uint64_t>(v));
  std::vector<torch::Tensor> out;
  for (const TensorSpec& s : kSpecs) out.push_back(torch::randn(s.shape));
  return out;
}

proto::WeightManifest Manifest(const std::string& dtype) {
  return MakeManifest(kSpecs, dtype, 4096);  // buckets that split the tensors
}

// The engine's source, which (torn mode) stops before the first bucket until the publisher
// has begun rewriting the slot: "begun" on stdout, then a line on stdin.
class PausingSource final : public DeviceBucketSource {
 public:
  PausingSource(DeviceBucketSource& inner, bool pause) : inner_(inner), pause_(pause) {}
  absl::Status Begin(int64_t v, int64_t n) override { return inner_.Begin(v, n); }
  absl::StatusOr<torch::Tensor> Next(int64_t v, int64_t b) override {
    if (pause_ && b == 0) {
      std::printf("begun\n");
      std::fflush(stdout);
      char line[16];
      if (std::fgets(line, sizeof line, stdin) == nullptr) return absl::AbortedError("no go");
    }
    return inner_.Next(v, b);
  }
  absl::Status Release(int64_t v, int64_t b) override { return inner_.Release(v, b); }
  absl::Status End(int64_t v) override { return inner_.End(v); }

 private:
  DeviceBucketSource& inner_;
  bool pause_;
};

// The engine process: "<location>|<dtype>|<mode>" in RLFORGE_CUDA_IPC_ENGINE. mode read: loads
// version 1 and compares it with the CPU's values; torn: the same, paused before its first
// bucket while the publisher starts rewriting the slot. Its one result line goes to stdout.
int RunEngine(const std::string& spec) {
  const size_t a = spec.find('|'), b = spec.rfind('|');
  const std::string location = spec.substr(0, a), dtype = spec.substr(a + 1, b - a - 1),
                    mode = spec.substr(b + 1);
  const proto::WeightManifest m = Manifest(dtype);
  const torch::Device device(torch::kCUDA, 0);
  auto source = CudaIpcSource::Open(location, m, device, 30);
  if (!source.ok()) return std::printf("open: %s\n", source.status().ToString().c_str()), 1;
  std::vector<std::pair<std::string, torch::Tensor>> mine;
  for (const TensorSpec& s : kSpecs) mine.push_back({s.name, torch::zeros(s.shape).to(device)});
  auto dest = MatchDeviceDestinations(m, mine, "engine");
  PausingSource paused(**source, mode == "torn");
  const absl::StatusOr<ReadStats> got = ReadDeviceVersion(m, 1, paused, *dest, "engine");
  if (!got.ok()) return std::printf("read: %s\n", got.status().ToString().c_str()), 0;
  const std::vector<torch::Tensor> want = Values(1);
  for (size_t i = 0; i < want.size(); ++i) {
    const torch::Tensor w =
        dtype == "bfloat16" ? want[i].to(torch::kBFloat16).to(torch::kFloat32) : want[i];
    if (!torch::equal(mine[i].second.cpu(), w)) {
      return std::printf("mismatch in %s\n", kSpecs[i].name.c_str()), 0;
    }
  }
  return std::printf("equal\n"), 0;
}

// Runs before main: this binary as the engine never reaches the tests.
const int kEngine = [] {
  if (const char* spec = std::getenv("RLFORGE_CUDA_IPC_ENGINE")) std::exit(RunEngine(spec));
  return 0;
}();

std::string SkipReason() {
  if (!RLFORGE_TORCH_CUDA) return "this build has a CPU-only libtorch";
  if (!torch::cuda::is_available()) return "no CUDA device";
  return "";
}

struct Engine {
  pid_t pid = 0;
  FILE* out = nullptr;  // its stdout
  FILE* in = nullptr;   // its stdin
};

Engine Spawn(const std::string& spec) {
  int to[2], from[2];
  EXPECT_EQ(pipe(to), 0);
  EXPECT_EQ(pipe(from), 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, to[0], 0);
  posix_spawn_file_actions_adddup2(&fa, from[1], 1);
  posix_spawn_file_actions_addclose(&fa, to[1]);
  posix_spawn_file_actions_addclose(&fa, from[0]);
  std::vector<std::string> env = {"RLFORGE_CUDA_IPC_ENGINE=" + spec};
  for (char** e = environ; *e != nullptr; ++e) env.push_back(*e);
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  char exe[] = "/proc/self/exe";
  char* argv[] = {exe, nullptr};
  Engine e;
  EXPECT_EQ(posix_spawn(&e.pid, exe, &fa, nullptr, argv, envp.data()), 0);
  close(to[0]);
  close(from[1]);
  e.out = fdopen(from[0], "r");
  e.in = fdopen(to[1], "w");
  return e;
}

std::string Line(Engine& e) {
  char buf[512];
  return std::fgets(buf, sizeof buf, e.out) == nullptr ? "(the engine exited)" : buf;
}

int Finish(Engine& e) {
  std::fclose(e.in);
  std::fclose(e.out);
  int status = 0;
  waitpid(e.pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

absl::Status Publish(const proto::WeightManifest& m, CudaIpcSink& sink, int64_t version) {
  DeviceBucketWriter w(m, sink, version);
  const std::vector<torch::Tensor> values = Values(version);
  for (size_t i = 0; i < values.size(); ++i) {
    if (absl::Status s = w.Append(kSpecs[i].name, values[i].to(torch::kCUDA)); !s.ok()) return s;
  }
  return w.Finish();
}

std::string SegmentName(const char* tag) {
  return "/rlforge-test-ipc-" + std::to_string(getpid()) + tag;
}

class CudaIpcGpuTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (const std::string why = SkipReason(); !why.empty()) GTEST_SKIP() << why;
  }
};

TEST_P(CudaIpcGpuTest, AnotherProcessCopiesTheVersionDeviceToDevice) {
  const proto::WeightManifest m = Manifest(GetParam());
  auto sink = CudaIpcSink::Create(SegmentName("r"), m, torch::Device(torch::kCUDA, 0));
  ASSERT_TRUE(sink.ok()) << sink.status();
  ASSERT_TRUE(Publish(m, **sink, 1).ok());
  Engine e = Spawn((*sink)->location() + "|" + GetParam() + "|read");
  EXPECT_EQ(Line(e), "equal\n");
  EXPECT_EQ(Finish(e), 0);
}

TEST_P(CudaIpcGpuTest, ASlotRewrittenDuringTheCopyIsRefusedAsTorn) {
  const proto::WeightManifest m = Manifest(GetParam());
  auto sink = CudaIpcSink::Create(SegmentName("t"), m, torch::Device(torch::kCUDA, 0));
  ASSERT_TRUE(sink.ok()) << sink.status();
  ASSERT_TRUE(Publish(m, **sink, 1).ok());
  Engine e = Spawn((*sink)->location() + "|" + GetParam() + "|torn");
  ASSERT_EQ(Line(e), "begun\n");
  ASSERT_TRUE((*sink)->Acquire(3, 0).ok());  // version 3 takes version 1's slot
  std::fputs("go\n", e.in);
  std::fflush(e.in);
  const std::string got = Line(e);
  EXPECT_NE(got.find("DATA_LOSS: engine could not load weight version 1: version 1's slot in " +
                     SegmentName("t") + " was rewritten while it was copied"),
            std::string::npos)
      << got;
  EXPECT_EQ(Finish(e), 0);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaIpcGpuTest, ::testing::Values("float32", "bfloat16"));

}  // namespace
}  // namespace rlforge
