// One language-model training step (forward, backward, AdamW) of the rlforge
// Transformer, timed, with achieved FLOP/s and a plain matmul peak measured in the
// same process. bench/lm_train_bench.py runs this next to the same model in PyTorch
// eager and prints the ratio:
//
//     python3 bench/lm_train_bench.py --build build --threads 2
//     build/bench/lm_train_bench --size 10m --threads 2 --steps 5   # this half alone
//     build/bench/lm_train_bench --size 10m --threads 1 --profile   # where a step's time goes
//     build/bench/lm_train_bench --size qwen0.5b --device cuda --dtype bfloat16 --steps 3
//
// Sizes, devices and dtypes: bench/bench_models.h. The model and AdamW's flat buffers live on
// --device in --dtype (bfloat16: parameters, gradients and AdamW's moments all in bf16, as
// the PyTorch side's; not trainer.mixed_precision's fp32 master weights). Batch x sequence:
// 4 x 256 at 10m and 50m, 8 x 512 at qwen0.5b (--batch, --seq override). On a GPU each
// split point of the step waits for the device, and the matmul peak is an 8192^3 product in
// --dtype (1024^3 fp32 on the CPU).
// --profile runs one more step under libtorch's profiler (input shapes recorded) and prints,
// per operator, its self time and calls, and for matrix products (mm, addmm, bmm) the FLOPs
// their shapes imply, so the step's time splits into matrix products at their achieved rate
// and everything else.
// Prints one JSON object per size on stdout.
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_models.h"
#include "common/clock.h"
#include "common/status.h"
#include "models/compute_threads.h"
#include "models/device.h"
#include "models/transformer.h"
#include "trainer/flat_adamw.h"

namespace {

using rlforge::models::Transformer;
using rlforge::models::TransformerConfig;

struct BenchShape {
  TransformerConfig config;
  int64_t batch = 4, seq = 256;
};

// batch, seq: 0 takes the size's own.
absl::StatusOr<BenchShape> Shape(const std::string& size, int64_t batch, int64_t seq) {
  absl::StatusOr<TransformerConfig> config = rlforge::bench::BenchModelConfig(size);
  if (!config.ok()) return config.status();
  BenchShape s;
  s.config = *config;
  if (size == "qwen0.5b") s.batch = 8, s.seq = 512;
  if (batch > 0) s.batch = batch;
  if (seq > 0) s.seq = seq;
  return s;
}

// Model FLOPs of one step: 6 x matmul parameters x tokens, plus attention scores and
// values (4 T^2 d per layer and sequence forward, x3 with backward).
double StepFlops(const BenchShape& s) {
  const auto& c = s.config;
  double tokens = static_cast<double>(s.batch * s.seq);
  double dense =
      static_cast<double>(rlforge::models::ParameterCount(c) -
                          c.vocab_size * c.hidden_size * (c.tie_word_embeddings ? 0 : 1));
  double attn = 12.0 * c.num_hidden_layers * s.batch * static_cast<double>(s.seq) * s.seq *
                c.num_attention_heads * c.head_dim;
  return 6.0 * dense * tokens + attn;
}

double MatmulPeak(const torch::Device& device, torch::Dtype dtype) {
  const int64_t n = device.is_cuda() ? 8192 : 1024;
  const auto options =
      torch::TensorOptions().device(device).dtype(device.is_cuda() ? dtype : torch::kFloat32);
  auto a = torch::randn({n, n}, options), b = torch::randn({n, n}, options);
  torch::mm(a, b);
  rlforge::bench::SyncDevice(device);
  double best = 1e30;
  for (int i = 0; i < 10; ++i) {
    const rlforge::Stopwatch timer;
    auto c = torch::mm(a, b);
    rlforge::bench::SyncDevice(device);
    best = std::min(best, timer.Seconds());
  }
  return 2.0 * static_cast<double>(n) * n * n / best;
}

// FLOPs of one matrix-product call from its recorded input shapes (0 for other operators).
double GemmFlops(const std::string& name, const std::vector<std::vector<int64_t>>& shapes) {
  auto dims = [&](size_t i) { return i < shapes.size() ? shapes[i] : std::vector<int64_t>{}; };
  if (name == "aten::mm" && dims(0).size() == 2 && dims(1).size() == 2) {
    return 2.0 * dims(0)[0] * dims(0)[1] * dims(1)[1];
  }
  if (name == "aten::addmm" && dims(1).size() == 2 && dims(2).size() == 2) {
    return 2.0 * dims(1)[0] * dims(1)[1] * dims(2)[1];
  }
  if (name == "aten::bmm" && dims(0).size() == 3 && dims(1).size() == 3) {
    return 2.0 * dims(0)[0] * dims(0)[1] * dims(0)[2] * dims(1)[2];
  }
  return 0;
}

// A matrix product's name with its operand shapes and strides-free layout, e.g.
// "aten::mm 1024x256 @ 256x768", so each shape of the step is reported on its own.
std::string GemmKey(const std::string& name, const std::vector<std::vector<int64_t>>& shapes) {
  std::ostringstream key;
  key << name;
  const size_t first = name == "aten::addmm" ? 1 : 0;
  for (size_t i = first; i < shapes.size() && i < first + 2; ++i) {
    key << (i == first ? " " : " @ ");
    for (size_t d = 0; d < shapes[i].size(); ++d) key << (d ? "x" : "") << shapes[i][d];
  }
  return key.str();
}

struct OpTotals {
  double self_us = 0, calls = 0, flops = 0;
};

// Self time per operator: each push/pop pair's span less the spans of the calls inside it.
std::map<std::string, OpTotals> SelfTimes(
    const torch::autograd::profiler::thread_event_lists& lists) {
  using torch::autograd::profiler::EventKind;
  using torch::autograd::profiler::LegacyEvent;
  std::map<std::string, OpTotals> out;
  for (const auto& events : lists) {
    struct Open {
      const LegacyEvent* push;
      double children_us = 0;
    };
    std::vector<Open> stack;
    for (const auto& e : events) {
      if (e.kind() == EventKind::PushRange) {
        stack.push_back({&e});
      } else if (e.kind() == EventKind::PopRange && !stack.empty()) {
        const Open open = stack.back();
        stack.pop_back();
        const double span = open.push->cpuElapsedUs(e);
        const double flops = GemmFlops(open.push->name(), open.push->shapes());
        OpTotals& t = out[flops > 0 ? GemmKey(open.push->name(), open.push->shapes())
                                    : std::string(open.push->name())];
        t.self_us += span - open.children_us;
        t.calls += 1;
        t.flops += flops;
        if (!stack.empty()) stack.back().children_us += span;
      }
    }
  }
  return out;
}

// Prints the profile of one step as JSON: operators by self time, matrix products' rate.
void PrintProfile(const std::string& size, const std::map<std::string, OpTotals>& ops,
                  double peak) {
  std::vector<std::pair<std::string, OpTotals>> sorted(ops.begin(), ops.end());
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.second.self_us > b.second.self_us; });
  double total_us = 0, gemm_us = 0, gemm_flops = 0;
  for (const auto& [name, t] : sorted) {
    total_us += t.self_us;
    if (t.flops > 0) gemm_us += t.self_us, gemm_flops += t.flops;
  }
  std::printf(
      "{\"profile\": \"%s\", \"profiled_s\": %.4f, \"gemm_s\": %.4f, "
      "\"gemm_flops\": %.4g, \"gemm_share_of_peak\": %.3f, \"ops\": [",
      size.c_str(), total_us * 1e-6, gemm_us * 1e-6, gemm_flops,
      gemm_flops / (gemm_us * 1e-6) / peak);
  for (size_t i = 0; i < sorted.size() && i < 25; ++i) {
    const auto& [name, t] = sorted[i];
    std::printf("%s{\"op\": \"%s\", \"self_ms\": %.2f, \"calls\": %.0f, \"gflops\": %.1f}",
                i ? ", " : "", name.c_str(), t.self_us * 1e-3, t.calls,
                t.flops > 0 ? t.flops / (t.self_us * 1e-6) * 1e-9 : 0.0);
  }
  std::printf("]}\n");
  std::fflush(stdout);
}

}  // namespace

namespace {

struct Args {
  std::vector<std::string> sizes;
  std::string device_name = "cpu", dtype_name = "float32";
  int threads = 2, steps = 5;
  int64_t batch = 0, seq = 0;
  bool profile = false;
};

// false (after the usage line) on an unknown argument.
bool ParseArgs(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool value = i + 1 < argc;
    if (arg == "--size" && value) {
      a->sizes.push_back(argv[++i]);
    } else if (arg == "--threads" && value) {
      a->threads = std::atoi(argv[++i]);
    } else if (arg == "--steps" && value) {
      a->steps = std::atoi(argv[++i]);
    } else if (arg == "--profile") {
      a->profile = true;
    } else if (arg == "--device" && value) {
      a->device_name = argv[++i];
    } else if (arg == "--dtype" && value) {
      a->dtype_name = argv[++i];
    } else if (arg == "--batch" && value) {
      a->batch = std::atoll(argv[++i]);
    } else if (arg == "--seq" && value) {
      a->seq = std::atoll(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: lm_train_bench [--size 10m|50m|qwen0.5b]... [--threads N] [--steps S] "
                   "[--device cpu|cuda|cuda:N] [--dtype float32|bfloat16] [--batch B] [--seq T] "
                   "[--profile]\n");
      return false;
    }
  }
  if (a->sizes.empty()) a->sizes = {"10m", "50m"};
  return true;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Times a.steps training steps (after one warm-up) of shape s and prints its JSON line.
void BenchShapeSteps(const std::string& size, const BenchShape& s, const Args& a,
                     const torch::Device& device, torch::Dtype dtype, double peak) {
  Transformer model(s.config);
  model->to(device, dtype);
  std::vector<torch::Tensor> params;
  for (auto& p : model->parameters()) params.push_back(p);
  rlforge::FlatAdamW opt(params, {.lr = 1e-4, .weight_decay = 0.01});
  const auto longs = torch::TensorOptions().dtype(torch::kInt64).device(device);
  auto tokens = torch::randint(s.config.vocab_size, {s.batch, s.seq + 1}, longs);
  auto inputs = tokens.narrow(1, 0, s.seq), targets = tokens.narrow(1, 1, s.seq);
  auto pos = torch::arange(s.seq, longs).view({1, s.seq}).expand({s.batch, s.seq});
  auto seg = torch::zeros({s.batch, s.seq}, longs);
  std::vector<double> times, fwd, bwd, upd;
  auto step = [&] {
    const rlforge::Stopwatch timer;
    opt.ZeroGrad();
    auto logits = model->Logits(model->Hidden(inputs, pos, seg));
    auto loss = torch::nn::functional::cross_entropy(logits.reshape({-1, s.config.vocab_size}),
                                                     targets.reshape({-1}));
    rlforge::bench::SyncDevice(device);
    const double t_fwd = timer.Seconds();
    loss.backward();
    rlforge::bench::SyncDevice(device);
    const double t_bwd = timer.Seconds() - t_fwd;
    opt.ClipGradNorm(1.0);
    opt.Step();
    rlforge::bench::SyncDevice(device);
    const double total = timer.Seconds();
    return std::array<double, 3>{t_fwd, t_bwd, total - t_fwd - t_bwd};
  };
  for (int i = 0; i < a.steps + 1; ++i) {  // the first step warms up
    const auto t = step();
    if (i == 0) continue;
    fwd.push_back(t[0]);
    bwd.push_back(t[1]);
    upd.push_back(t[2]);
    times.push_back(t[0] + t[1] + t[2]);
  }
  const double median = Median(times), flops = StepFlops(s);
  std::printf(
      "{\"impl\": \"rlforge\", \"size\": \"%s\", \"params\": %ld, \"batch\": %ld, \"seq\": %ld, "
      "\"device\": \"%s\", \"dtype\": \"%s\", \"threads\": %d, \"step_s\": %.4f, "
      "\"flops_per_step\": %.4g, \"achieved_flops\": %.4g, "
      "\"matmul_peak_flops\": %.4g, \"share_of_peak\": %.3f, \"forward_s\": %.4f, "
      "\"backward_s\": %.4f, \"optimizer_s\": %.4f}\n",
      size.c_str(), static_cast<long>(rlforge::models::ParameterCount(s.config)),
      static_cast<long>(s.batch), static_cast<long>(s.seq), device.str().c_str(),
      a.dtype_name.c_str(), a.threads, median, flops, flops / median, peak, flops / median / peak,
      Median(fwd), Median(bwd), Median(upd));
  std::fflush(stdout);
  if (a.profile) {
    using namespace torch::autograd::profiler;
    enableProfilerLegacy(ProfilerConfig(ProfilerState::CPU, /*report_input_shapes=*/true));
    step();
    PrintProfile(size, SelfTimes(disableProfilerLegacy()), peak);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!ParseArgs(argc, argv, &a)) return 2;
  absl::StatusOr<torch::Dtype> dtype = rlforge::bench::BenchDtype(a.dtype_name);
  absl::StatusOr<torch::Device> device = rlforge::models::TorchDevice("--device", a.device_name, 0);
  for (const absl::Status& st : {dtype.status(), device.status()}) {
    if (!st.ok()) {
      std::fprintf(stderr, "lm_train_bench: %s\n", rlforge::Msg(st).c_str());
      return 2;
    }
  }
  if (a.profile && device->is_cuda()) {
    std::fprintf(stderr, "lm_train_bench: --profile times CPU operators; use --device cpu\n");
    return 2;
  }
  rlforge::SetComputeThreads(a.threads);  // torch's and OpenBLAS's pools alike
  torch::manual_seed(0);
  const double peak = MatmulPeak(*device, *dtype);
  for (const auto& size : a.sizes) {
    absl::StatusOr<BenchShape> shape = Shape(size, a.batch, a.seq);
    if (!shape.ok()) {
      std::fprintf(stderr, "lm_train_bench: %s\n", rlforge::Msg(shape.status()).c_str());
      return 2;
    }
    BenchShapeSteps(size, *shape, a, *device, *dtype, peak);
  }
  return 0;
}
