#include "rollout/decode_graphs.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "common/exceptions.h"
#include "common/status.h"
#include "config/build_info.h"

#if RLFORGE_TORCH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace rlforge {

namespace {

// A copy of `v` in a CPU tensor of T's dtype (libtorch 1.13's torch::tensor makes int32 Long).
template <typename T>
torch::Tensor HostTensor(const std::vector<T>& v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return torch::from_blob(const_cast<T*>(v.data()), {n}, c10::CppTypeToScalarType<T>::value)
      .clone();
}

}  // namespace

kernel_ops::SampleSettings HostSampling::ToDevice(const torch::Device& device) const {
  kernel_ops::SampleSettings s;
  s.temperature = HostTensor(temperature).to(device), s.top_k = HostTensor(top_k).to(device);
  s.top_p = HostTensor(top_p).to(device), s.seeds = HostTensor(seeds).to(device);
  s.steps = HostTensor(steps).to(device);
  return s;
}

// One padded size's static buffers, its captured graph (CUDA) and the outputs it writes.
struct DecodeGraphs::Graph {
  int64_t rows = 0;
  DeviceStep in;
  kernel_ops::SampledRows out;
#if RLFORGE_TORCH_CUDA
  std::unique_ptr<at::cuda::CUDAGraph> graph;
#endif
};

DecodeGraphs::DecodeGraphs(const DecodeGraphOptions& options, DeviceStepFn step)
    : options_(options), step_(std::move(step)) {}

DecodeGraphs::~DecodeGraphs() = default;

int64_t DecodeGraphs::PaddedRows(int64_t rows, int64_t max_batch) {
  int64_t p = 1;
  while (p < rows) p *= 2;
  return std::min(p, max_batch);
}

bool DecodeGraphs::Serves(const PagedBatch& b, int64_t draws) const {
  const int64_t rows = static_cast<int64_t>(b.row_seq.size());
  if (rows == 0 || rows > options_.max_batch || draws != rows) return false;
  if (static_cast<int64_t>(b.table_start.size()) != rows + 1) return false;  // a row a sequence
  for (int64_t r = 0; r < rows; ++r) {
    if (b.row_seq[r] != r || b.row_context[r] > options_.max_context ||
        b.table_start[r + 1] - b.table_start[r] > options_.max_blocks) {
      return false;
    }
  }
  return true;
}

absl::StatusOr<DecodeGraphs::Graph*> DecodeGraphs::GraphFor(int64_t padded_rows) {
  auto it = graphs_.find(padded_rows);
  if (it != graphs_.end()) return it->second.get();
  return CallCatching(
      [&]() -> absl::StatusOr<Graph*> {
        auto g = std::make_unique<Graph>();
        const int64_t p = padded_rows, width = options_.max_blocks;
        auto make = [&](torch::ScalarType type, int64_t n) {
          return torch::zeros({n}, torch::dtype(type).device(options_.device));
        };
        g->rows = p;
        g->in.tokens = make(torch::kInt64, p), g->in.positions = make(torch::kInt64, p);
        kernel_ops::PagedIndex& x = g->in.index;
        // One row per sequence: row r is sequence r, whose table is columns [r * width, +width).
        x.row_seq = torch::arange(p, torch::dtype(torch::kInt32)).to(options_.device);
        x.table_start = (torch::arange(p + 1, torch::dtype(torch::kInt32)) * width)
                            .to(options_.device, torch::kInt32);
        x.row_context = make(torch::kInt32, p), x.row_slot = make(torch::kInt64, p);
        x.tables = make(torch::kInt32, p * width);
        x.seq_skip_from = make(torch::kInt64, p), x.seq_skip = make(torch::kInt64, p);
        x.block_size = options_.block_size;
        x.max_context = options_.max_context;  // the grid of the longest context, fixed
        kernel_ops::SampleSettings& s = g->in.sampling;
        s.temperature = make(torch::kFloat32, p), s.top_k = make(torch::kInt32, p);
        s.top_p = make(torch::kFloat32, p), s.seeds = make(torch::kInt64, p);
        s.steps = make(torch::kInt64, p);
        Graph* raw = g.get();
        graphs_[padded_rows] = std::move(g);
        return raw;
      },
      "engine: decode graph buffers: ");
}

absl::StatusOr<std::vector<SampledToken>> DecodeGraphs::Run(const std::vector<int64_t>& tokens,
                                                            const std::vector<int64_t>& positions,
                                                            const PagedBatch& b,
                                                            const HostSampling& sampling) {
  const int64_t rows = static_cast<int64_t>(tokens.size());
  if (!Serves(b, rows)) {
    return absl::InternalError(
        absl::StrCat("engine: decode graphs given a step of ", rows, " rows they do not serve"));
  }
  const int64_t p = PaddedRows(rows, options_.max_batch), width = options_.max_blocks;
  ASSIGN_OR_RETURN(Graph * g, GraphFor(p));
  // Padding rows: token 0 at position 0, context 1, their one slot and whole table in the
  // scratch block; greedy, so no sampler work is wasted on them.
  const int32_t scratch = options_.scratch_block;
  std::vector<int64_t> tok(p, 0), pos(p, 0), slot(p, int64_t{scratch} * options_.block_size);
  std::vector<int32_t> context(p, 1), tables(p * width, scratch), top_k(p, 0);
  std::vector<int64_t> skip_from(p, std::numeric_limits<int64_t>::max()), skip(p, 0);
  std::vector<float> temperature(p, 0), top_p(p, 1);
  std::vector<int64_t> seeds(p, 0), steps(p, 0);
  for (int64_t r = 0; r < rows; ++r) {
    tok[r] = tokens[r], pos[r] = positions[r], slot[r] = b.row_slot[r];
    context[r] = b.row_context[r];
    std::copy(b.tables.begin() + b.table_start[r], b.tables.begin() + b.table_start[r + 1],
              tables.begin() + r * width);
    if (!b.seq_skip_from.empty()) skip_from[r] = b.seq_skip_from[r], skip[r] = b.seq_skip[r];
    temperature[r] = sampling.temperature[r], top_k[r] = sampling.top_k[r];
    top_p[r] = sampling.top_p[r], seeds[r] = sampling.seeds[r], steps[r] = sampling.steps[r];
  }
  return CallCatching(
      [&]() -> absl::StatusOr<std::vector<SampledToken>> {
        torch::NoGradGuard no_grad;
        g->in.tokens.copy_(HostTensor(tok)), g->in.positions.copy_(HostTensor(pos));
        kernel_ops::PagedIndex& x = g->in.index;
        x.row_context.copy_(HostTensor(context)), x.row_slot.copy_(HostTensor(slot));
        x.tables.copy_(HostTensor(tables));
        x.seq_skip_from.copy_(HostTensor(skip_from)), x.seq_skip.copy_(HostTensor(skip));
        kernel_ops::SampleSettings& s = g->in.sampling;
        s.temperature.copy_(HostTensor(temperature)), s.top_k.copy_(HostTensor(top_k));
        s.top_p.copy_(HostTensor(top_p)), s.seeds.copy_(HostTensor(seeds));
        s.steps.copy_(HostTensor(steps));
        RETURN_IF_ERROR(Replay(*g));
        const torch::Tensor drawn = g->out.tokens.narrow(0, 0, rows).cpu();
        const torch::Tensor logprobs = g->out.logprobs.narrow(0, 0, rows).cpu();
        std::vector<SampledToken> out(rows);
        for (int64_t r = 0; r < rows; ++r) {
          out[r] = {drawn.data_ptr<int32_t>()[r], logprobs.data_ptr<float>()[r]};
        }
        return out;
      },
      "engine: decode graph step failed: ");
}

absl::Status DecodeGraphs::Replay(Graph& g) {
  ++replays_;
#if RLFORGE_TORCH_CUDA
  if (options_.device.is_cuda()) {
    if (!g.graph) RETURN_IF_ERROR(Capture(g));
    g.graph->replay();
    return absl::OkStatus();
  }
#endif
  g.out = step_(g.in);  // a CPU model: the padded step, eagerly
  return absl::OkStatus();
}

absl::Status DecodeGraphs::Capture(Graph& g) {
#if RLFORGE_TORCH_CUDA
  const c10::cuda::CUDAGuard guard(options_.device);
  // The buffers were just filled on the current stream; capture runs on a side stream (CUDA
  // refuses to capture the legacy default stream), so let everything before it finish.
  c10::cuda::device_synchronize();
  c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, options_.device.index());
  {
    const c10::cuda::CUDAStreamGuard on_side(side);
    // A warm-up run first: lazy set-up (cuBLAS handles and workspaces, the first use of a
    // shape) happens outside the capture. It computes the step the replay recomputes: the same
    // inputs write the same KV.
    g.out = step_(g.in);
    side.synchronize();
    auto graph = std::make_unique<at::cuda::CUDAGraph>();
    // Every size shares the first graph's memory pool: replays never overlap (one stream).
    at::cuda::MempoolId_t pool{0, 0};
    for (const auto& [rows, other] : graphs_) {
      if (other->graph) pool = other->graph->pool();
    }
    graph->capture_begin(pool);
    try {
      g.out = step_(g.in);
    } catch (...) {
      try {
        graph->capture_end();  // leaves the stream out of capture mode; the graph is discarded
      } catch (...) {
      }
      throw;
    }
    graph->capture_end();
    g.graph = std::move(graph);
  }
  side.synchronize();
  return absl::OkStatus();
#else
  (void)g;
  return absl::FailedPreconditionError(
      "engine: CUDA graphs need a CUDA libtorch; this build's is CPU-only");
#endif
}

bool DecodeGraphs::ParametersMoved(const std::vector<torch::Tensor>& params) {
  std::vector<const void*> now;
  now.reserve(params.size());
  for (const torch::Tensor& t : params) now.push_back(t.data_ptr());
  if (param_ptrs_.empty() || now == param_ptrs_) {
    param_ptrs_ = std::move(now);
    return false;
  }
  param_ptrs_ = std::move(now);
  graphs_.clear();
  ++drops_;
  return true;
}

}  // namespace rlforge
