// One language-model training step (forward, backward, AdamW) of the rlforge
// Transformer, timed, with achieved FLOP/s and a plain matmul peak measured in the
// same process. bench/lm_train_bench.py runs this next to the same model in PyTorch
// eager and prints the ratio:
//
//     python3 bench/lm_train_bench.py --build build --threads 2
//     build/bench/lm_train_bench --size 10m --threads 2 --steps 5   # this half alone
//
// Prints one JSON object per size on stdout.
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/clock.h"
#include "models/transformer.h"
#include "trainer/flat_adamw.h"

namespace {

using rlforge::models::Transformer;
using rlforge::models::TransformerConfig;

struct BenchShape {
  TransformerConfig config;
  int64_t batch = 4, seq = 256;
};

BenchShape Shape(const std::string& size) {
  BenchShape s;
  TransformerConfig& c = s.config;
  c.architecture = "LlamaForCausalLM";
  c.num_attention_heads = 8;
  c.num_key_value_heads = 4;
  c.max_position_embeddings = 1024;
  if (size == "10m") {
    c.vocab_size = 8192;
    c.hidden_size = 256;
    c.intermediate_size = 768;
    c.num_hidden_layers = 8;
  } else {
    c.vocab_size = 16384;
    c.hidden_size = 512;
    c.intermediate_size = 1408;
    c.num_hidden_layers = 12;
  }
  c.head_dim = c.hidden_size / c.num_attention_heads;
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

double MatmulPeak() {
  auto a = torch::randn({1024, 1024}), b = torch::randn({1024, 1024});
  torch::mm(a, b);
  double best = 1e30;
  for (int i = 0; i < 10; ++i) {
    const rlforge::Stopwatch timer;
    auto c = torch::mm(a, b);
    best = std::min(best, timer.Seconds());
  }
  return 2.0 * 1024 * 1024 * 1024 / best;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> sizes;
  int threads = 2, steps = 5;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--size" && i + 1 < argc) {
      sizes.push_back(argv[++i]);
    } else if (a == "--threads" && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (a == "--steps" && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: lm_train_bench [--size 10m|50m]... [--threads N] [--steps S]\n");
      return 2;
    }
  }
  if (sizes.empty()) sizes = {"10m", "50m"};
  torch::set_num_threads(threads);
  torch::manual_seed(0);
  const double peak = MatmulPeak();
  for (const auto& size : sizes) {
    BenchShape s = Shape(size);
    Transformer model(s.config);
    std::vector<torch::Tensor> params;
    for (auto& p : model->parameters()) params.push_back(p);
    rlforge::FlatAdamW opt(params, {.lr = 1e-4, .weight_decay = 0.01});
    auto tokens = torch::randint(s.config.vocab_size, {s.batch, s.seq + 1}, torch::kInt64);
    auto inputs = tokens.narrow(1, 0, s.seq), targets = tokens.narrow(1, 1, s.seq);
    auto pos = torch::arange(s.seq, torch::kInt64).view({1, s.seq}).expand({s.batch, s.seq});
    auto seg = torch::zeros({s.batch, s.seq}, torch::kInt64);
    std::vector<double> times, fwd, bwd, upd;
    for (int i = 0; i < steps + 1; ++i) {  // the first step warms up
      const rlforge::Stopwatch timer;
      opt.ZeroGrad();
      auto logits = model->Logits(model->Hidden(inputs, pos, seg));
      auto loss = torch::nn::functional::cross_entropy(logits.reshape({-1, s.config.vocab_size}),
                                                       targets.reshape({-1}));
      double t_fwd = timer.Seconds();
      loss.backward();
      double t_bwd = timer.Seconds() - t_fwd;
      opt.ClipGradNorm(1.0);
      opt.Step();
      if (i > 0) {
        times.push_back(timer.Seconds());
        fwd.push_back(t_fwd);
        bwd.push_back(t_bwd);
        upd.push_back(times.back() - t_fwd - t_bwd);
      }
    }
    auto med = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    double median = med(times);
    double flops = StepFlops(s);
    std::printf(
        "{\"impl\": \"rlforge\", \"size\": \"%s\", \"params\": %ld, \"batch\": %ld, \"seq\": %ld, "
        "\"threads\": %d, \"step_s\": %.4f, \"flops_per_step\": %.4g, \"achieved_flops\": %.4g, "
        "\"matmul_peak_flops\": %.4g, \"share_of_peak\": %.3f, \"forward_s\": %.4f, "
        "\"backward_s\": %.4f, \"optimizer_s\": %.4f}\n",
        size.c_str(), static_cast<long>(rlforge::models::ParameterCount(s.config)),
        static_cast<long>(s.batch), static_cast<long>(s.seq), threads, median, flops,
        flops / median, peak, flops / median / peak, med(fwd), med(bwd), med(upd));
    std::fflush(stdout);
  }
  return 0;
}
