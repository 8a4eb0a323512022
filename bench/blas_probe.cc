// Which BLAS numerics does this machine have? Prints, as one JSON object, the OpenBLAS
// core it picked (OPENBLAS_CORETYPE overrides it), a 1024^3 fp32 matmul's FLOP rate, and
// for each matrix shape the arithmetic models train with a hash of torch::mm's output
// bits and its FLOP rate. Inputs come from a counter-based generator, so they are the
// same bits on every machine: two machines whose hashes agree train the same SFT and GRPO
// runs bit for bit; where they differ, docs/reproducibility.md says what that does.
//
//     build/bench/blas_probe
//     OPENBLAS_CORETYPE=Zen build/bench/blas_probe     # an AVX2-only EPYC's kernels
#include <dlfcn.h>
#include <torch/torch.h>

#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/hash.h"
#include "models/compute_threads.h"

namespace {

struct Shape {
  int64_t m, k, n;
  bool transpose_a;  // backward's weight gradient reads the activations transposed
};

// Values in [-1, 1) with 2^-20 steps: exact in fp32 and identical on any machine.
torch::Tensor Fill(int64_t rows, int64_t cols, uint64_t seed) {
  auto t = torch::empty({rows, cols}, torch::kFloat32);
  float* p = t.data_ptr<float>();
  for (int64_t i = 0; i < rows * cols; ++i) {
    const uint64_t r = rlforge::SplitMix64(seed + static_cast<uint64_t>(i));
    p[i] = static_cast<float>(static_cast<int64_t>(r >> 43) - (int64_t{1} << 20)) * 0x1.0p-20f;
  }
  return t;
}

uint64_t HashBits(const torch::Tensor& t) {
  const auto c = t.contiguous();
  uint64_t h = 0xcbf29ce484222325ull;
  const auto* bytes = static_cast<const unsigned char*>(c.data_ptr());
  for (size_t i = 0; i < static_cast<size_t>(c.numel()) * sizeof(float); ++i) {
    h = (h ^ bytes[i]) * 0x100000001b3ull;
  }
  return h;
}

// Best of `reps` timings of a * b, as FLOP/s.
double Rate(const torch::Tensor& a, const torch::Tensor& b, int reps) {
  torch::mm(a, b);
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const rlforge::Stopwatch timer;
    auto c = torch::mm(a, b);
    best = std::min(best, timer.Seconds());
  }
  return 2.0 * a.size(0) * a.size(1) * b.size(1) / best;
}

std::string CoreName() {
  using GetName = char* (*)();
  auto get = reinterpret_cast<GetName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  return get ? get() : "not OpenBLAS";
}

}  // namespace

int main() {
  rlforge::SetComputeThreads(1);  // torch's and OpenBLAS's pools, as trainer.threads: 1
  const std::vector<Shape> shapes = {
      // configs/sft_arith*.yaml's model (width 128, MLP 352): 12 rows x 8 tokens, and 768.
      {96, 128, 128, false},
      {96, 128, 352, false},
      {96, 352, 128, false},
      {768, 128, 128, false},
      {768, 128, 352, false},
      {768, 352, 128, false},
      {128, 768, 352, true},
      {352, 768, 128, true},
      // bench/lm_train_bench's 10M model (width 256, MLP 768, 1024 tokens).
      {1024, 256, 768, false},
      {1024, 768, 256, false},
      {768, 1024, 256, true}};
  const auto square_a = Fill(1024, 1024, 1), square_b = Fill(1024, 1024, 2);
  std::printf("{\"openblas_core\": \"%s\", \"peak_1024_gflops\": %.1f, \"shapes\": [",
              CoreName().c_str(), Rate(square_a, square_b, 10) * 1e-9);
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Shape& s = shapes[i];
    auto a = s.transpose_a ? Fill(s.k, s.m, 3 + i).t() : Fill(s.m, s.k, 3 + i);
    auto b = Fill(s.k, s.n, 100 + i);
    std::printf("%s{\"m\": %" PRId64 ", \"k\": %" PRId64 ", \"n\": %" PRId64
                ", \"a_transposed\": %s, \"hash\": \"%016" PRIx64 "\", \"gflops\": %.1f}",
                i ? ", " : "", s.m, s.k, s.n, s.transpose_a ? "true" : "false",
                HashBits(torch::mm(a, b)), Rate(a, b, 20) * 1e-9);
  }
  std::printf("]}\n");
  return 0;
}
