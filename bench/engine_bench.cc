// Rollout-engine throughput on a GRPO-shaped load, the rlforge side of
// bench/engine_bench.py (which adds transformers' generate() on the same
// weights and workload, and prints the comparison).
//
// For a ~10M or ~50M Llama-style model, or a Qwen2.5-0.5B-shaped one, with random
// weights (bench/bench_models.h): 64 prompts of 96-160 tokens (mean ~128), n = 8
// samples each, temperature 1, each prompt with its own stop point (no EOS, so every
// framework generates exactly the same number of tokens): 32-256 new tokens at 10m and
// 50m, 256 at qwen0.5b (GRPO's shape; --max-new N gives every prompt N). Runs the engine with
// prefix sharing on and off (tokens/s, prompt KV memory, peak KV blocks) and naive generation
// without a KV cache (full recompute every token, on the first group and its first --naive-tokens
// tokens: it is quadratic). Writes the model as a Hugging Face checkpoint and the workload as JSON
// into --dir, and one JSON line of results to stdout. The checkpoint is written in fp32 from the
// CPU; the model is then moved to --device in --dtype, and the engine follows its parameters (on a
// GPU it runs its model step through the CUDA kernels, docs/gpu.md). On a GPU the shared run
// replays CUDA graphs for its decode steps (--cuda-graphs 0: not), and a second shared run without
// them is timed for comparison (engine_shared_no_graphs).
//
//   build/bench/engine_bench --size 10m --dir /tmp/engine-bench [--threads 1]
//       [--prompts 64] [--n 8] [--naive-tokens 32] [--time-unshared 1]
//       [--device cpu|cuda|cuda:N] [--dtype float32|bfloat16] [--max-new N] [--cuda-graphs 1]
#include <malloc.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_models.h"
#include "common/clock.h"
#include "common/status.h"
#include "models/compute_threads.h"
#include "models/device.h"
#include "models/hf_checkpoint.h"
#include "models/transformer.h"
#include "nlohmann/json.hpp"
#include "rollout/llm_engine.h"

namespace {

using rlforge::models::Transformer;
using rlforge::models::TransformerConfig;

struct Workload {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int64_t> max_new;
  int64_t n = 8;
};

// max_new > 0: every prompt stops at max_new new tokens; else at 32-256.
Workload MakeWorkload(int64_t prompts, int64_t n, int64_t vocab, int64_t max_new) {
  std::mt19937_64 rng(7);
  Workload w;
  w.n = n;
  for (int64_t p = 0; p < prompts; ++p) {
    int64_t len = 96 + static_cast<int64_t>(rng() % 65);
    std::vector<int32_t> t(static_cast<size_t>(len));
    for (auto& x : t) x = static_cast<int32_t>(1 + rng() % (vocab - 1));
    w.prompts.push_back(std::move(t));
    const int64_t drawn = 32 + static_cast<int64_t>(rng() % 225);
    w.max_new.push_back(max_new > 0 ? max_new : drawn);
  }
  return w;
}

struct EngineResult {
  double seconds = 0;
  int64_t tokens = 0;
  rlforge::EngineStats stats;
  int64_t kv_bytes_per_slot = 0;
  bool kernel_path = false;  // the engine's step went through the kernel library
};

// kv_only: one new token per sample, to read the prompt KV footprint quickly.
EngineResult RunEngine(Transformer& model, const Workload& w, bool prefix_sharing, bool cuda_graphs,
                       bool kv_only = false) {
  rlforge::EngineSettings s;
  s.block_size = 16;
  // Every sample of the load fits at once, unshared: no preemption.
  s.num_blocks = 0;
  for (size_t p = 0; p < w.prompts.size(); ++p) {
    const int64_t slots = static_cast<int64_t>(w.prompts[p].size()) + w.max_new[p];
    s.num_blocks += w.n * ((slots + s.block_size - 1) / s.block_size + 1);
  }
  s.max_batch = 512;
  s.max_tokens_per_step = 2048;
  s.prefix_sharing = prefix_sharing;
  s.cuda_graphs = cuda_graphs;
  rlforge::LlmEngine engine(model, s, 0);
  for (size_t p = 0; p < w.prompts.size(); ++p) {
    rlforge::GenerationRequest r;
    r.id = p;
    r.prompt = w.prompts[p];
    r.n = w.n;
    r.params.temperature = 1.0;
    r.params.max_tokens = kv_only ? 1 : w.max_new[p];
    r.params.seed = 1000 + p;
    absl::Status st = engine.Submit(r);
    if (!st.ok()) {
      std::fprintf(stderr, "submit: %s\n", rlforge::Msg(st).c_str());
      std::exit(1);
    }
  }
  const torch::Device device = model->parameters().front().device();
  rlforge::bench::SyncDevice(device);
  const rlforge::Stopwatch timer;
  absl::Status st = engine.RunToCompletion();
  rlforge::bench::SyncDevice(device);
  EngineResult out;
  out.seconds = timer.Seconds();
  if (!st.ok()) {
    std::fprintf(stderr, "engine: %s\n", rlforge::Msg(st).c_str());
    std::exit(1);
  }
  int64_t tokens = 0;
  for (const auto& g : engine.TakeFinished()) {
    for (const auto& smp : g.samples) tokens += static_cast<int64_t>(smp.tokens.size());
  }
  out.tokens = tokens;
  out.stats = engine.stats();
  out.kernel_path = engine.uses_kernel_library();
  const TransformerConfig& c = model->config();
  const int64_t element = model->parameters().front().element_size();  // the KV pool's dtype
  out.kv_bytes_per_slot = 2 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim * element;
  return out;
}

// Naive sampling without a KV cache: the whole sequence through the model for
// every new token. The group's n samples run as one batch (same lengths).
double NaiveTokensPerSecond(Transformer& model, const std::vector<int32_t>& prompt, int64_t n,
                            int64_t new_tokens) {
  torch::NoGradGuard g;
  const torch::Device device = model->parameters().front().device();
  const auto longs = torch::TensorOptions().dtype(torch::kLong).device(device);
  auto tokens = torch::tensor(std::vector<int64_t>(prompt.begin(), prompt.end()))
                    .to(device)
                    .unsqueeze(0)
                    .repeat({n, 1});
  torch::manual_seed(1);
  rlforge::bench::SyncDevice(device);
  const rlforge::Stopwatch timer;
  for (int64_t i = 0; i < new_tokens; ++i) {
    const int64_t len = tokens.size(1);
    auto positions = torch::arange(len, longs).unsqueeze(0).expand({n, len});
    auto segments = torch::zeros({n, len}, longs);
    auto hidden = model->Hidden(tokens, positions, segments);
    auto logits = model->Logits(hidden.select(1, len - 1)).to(torch::kFloat32);
    auto next = torch::multinomial(torch::softmax(logits, -1), 1);
    tokens = torch::cat({tokens, next}, 1);
  }
  rlforge::bench::SyncDevice(device);
  const double s = timer.Seconds();
  return static_cast<double>(n * new_tokens) / s;
}

}  // namespace

int main(int argc, char** argv) {
  // As rlforge-actor does: keep freed tensor memory instead of returning it to
  // the kernel every step.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  std::string size = "10m", dir = "/tmp/engine-bench", device_name = "cpu", dtype_name = "float32";
  int threads = 1;
  int64_t prompts = 64, n = 8, naive_tokens = 32, max_new = -1;
  bool time_unshared = false, cuda_graphs = true;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--size") size = v;
    if (k == "--dir") dir = v;
    if (k == "--threads") threads = std::stoi(v);
    if (k == "--prompts") prompts = std::stoll(v);
    if (k == "--n") n = std::stoll(v);
    if (k == "--naive-tokens") naive_tokens = std::stoll(v);
    if (k == "--time-unshared") time_unshared = v == "1";
    if (k == "--device") device_name = v;
    if (k == "--dtype") dtype_name = v;
    if (k == "--max-new") max_new = std::stoll(v);
    if (k == "--cuda-graphs") cuda_graphs = v == "1";
  }
  absl::StatusOr<TransformerConfig> config_or = rlforge::bench::BenchModelConfig(size);
  absl::StatusOr<torch::Dtype> dtype = rlforge::bench::BenchDtype(dtype_name);
  absl::StatusOr<torch::Device> device = rlforge::models::TorchDevice("--device", device_name, 0);
  for (const absl::Status& s : {config_or.status(), dtype.status(), device.status()}) {
    if (!s.ok()) {
      std::fprintf(stderr, "engine_bench: %s\n", rlforge::Msg(s).c_str());
      return 2;
    }
  }
  if (max_new < 0) max_new = size == "qwen0.5b" ? 256 : 0;
  rlforge::SetComputeThreads(threads);  // torch's and OpenBLAS's pools alike
  torch::manual_seed(0);
  const TransformerConfig& config = *config_or;
  Transformer model(config);
  model->eval();
  std::string model_dir = dir + "/model-" + size;
  std::filesystem::create_directories(model_dir);
  if (absl::Status s = rlforge::models::SaveHfModel(model, model_dir); !s.ok()) {
    std::fprintf(stderr, "save: %s\n", rlforge::Msg(s).c_str());
    return 1;
  }
  model->to(*device, *dtype);
  Workload w = MakeWorkload(prompts, n, config.vocab_size, max_new);
  nlohmann::json wj = {{"prompts", w.prompts}, {"max_new", w.max_new}, {"n", w.n}};
  std::ofstream(dir + "/workload-" + size + ".json") << wj.dump();

  EngineResult shared = RunEngine(model, w, true, cuda_graphs);
  // Without sharing only the KV footprint is needed (--time-unshared 1 times it too).
  EngineResult unshared = RunEngine(model, w, false, cuda_graphs, !time_unshared);
  double naive = NaiveTokensPerSecond(model, w.prompts[0], n, naive_tokens);
  int64_t want_tokens = 0;
  for (int64_t m : w.max_new) want_tokens += m * n;
  auto mib = [](int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); };
  auto as_json = [&](const EngineResult& r) {
    return nlohmann::json{{"seconds", r.seconds},
                          {"tokens", r.tokens},
                          {"tokens_per_s", r.tokens / r.seconds},
                          {"prompt_kv_mib", mib(r.stats.prompt_kv_slots * r.kv_bytes_per_slot)},
                          {"peak_kv_mib", mib(r.stats.peak_blocks * 16 * r.kv_bytes_per_slot)},
                          {"preemptions", r.stats.preemptions},
                          {"steps", r.stats.steps},
                          {"graph_steps", r.stats.graph_steps}};
  };
  nlohmann::json out = {
      {"size", size},
      {"parameters", rlforge::models::ParameterCount(config)},
      {"threads", threads},
      {"device", device->str()},
      {"dtype", dtype_name},
      {"engine_path", shared.kernel_path ? "kernel library" : "libtorch"},
      {"requested_tokens", want_tokens},
      {"engine_shared", as_json(shared)},
      {"engine_unshared", as_json(unshared)},
      {"naive", {{"tokens_per_s", naive}, {"sequences", n}, {"new_tokens", naive_tokens}}},
      {"model_dir", model_dir},
  };
  out["cuda_graphs"] = device->is_cuda() && cuda_graphs;
  if (device->is_cuda() && cuda_graphs) {  // the same load without graphs, for comparison
    out["engine_shared_no_graphs"] = as_json(RunEngine(model, w, true, false));
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
