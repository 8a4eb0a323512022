#include "rollout/kernel_ops.h"

#include <limits>
#include <stdexcept>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/exceptions.h"
#include "common/status.h"
#include "kernels/reference.h"
#include "rollout/kernel_ops_build.h"

#if RLFORGE_KERNEL_OPS_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "kernels/cuda_kernels.h"
#endif

namespace rlforge::kernel_ops {

namespace {

using kernels::DType;

std::string ShapeText(const torch::Tensor& t) {
  return absl::StrCat("[", absl::StrJoin(t.sizes(), ", "), "]");
}

// A tensor is what an op needs: defined, on `device`, of `dtype`, contiguous, and of `shape`
// (-1: any size there).
absl::Status Check(const char* op, const char* name, const torch::Tensor& t,
                   const torch::Device& device, torch::ScalarType dtype,
                   const std::vector<int64_t>& shape) {
  auto bad = [&](auto&&... what) {
    return absl::InvalidArgumentError(absl::StrCat("kernel_ops::", op, ": ", name, ": ", what...));
  };
  if (!t.defined()) return bad("expected a tensor, got none");
  if (t.device() != device) {
    return bad("expected on ", device.str(), " (the first tensor's device), got ",
               t.device().str());
  }
  if (t.scalar_type() != dtype) {
    return bad("expected dtype ", c10::toString(dtype), ", got ", c10::toString(t.scalar_type()));
  }
  bool same = t.dim() == static_cast<int64_t>(shape.size());
  for (size_t i = 0; same && i < shape.size(); ++i) same = shape[i] < 0 || shape[i] == t.size(i);
  if (!same) {
    std::vector<std::string> want;
    for (int64_t s : shape) want.push_back(s < 0 ? "*" : std::to_string(s));
    return bad("expected shape [", absl::StrJoin(want, ", "), "], got ", ShapeText(t));
  }
  if (!t.is_contiguous())
    return bad("expected a contiguous tensor, got strides ", absl::StrJoin(t.strides(), ", "));
  return absl::OkStatus();
}

// The kernels' dtype of a float tensor: fp32 or bf16.
absl::StatusOr<DType> FloatDType(const char* op, const char* name, const torch::Tensor& t) {
  if (!t.defined()) {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel_ops::", op, ": ", name, ": expected a tensor, got none"));
  }
  if (t.scalar_type() == torch::kFloat32) return DType::kF32;
  if (t.scalar_type() == torch::kBFloat16) return DType::kBF16;
  return absl::InvalidArgumentError(absl::StrCat("kernel_ops::", op, ": ", name,
                                                 ": expected dtype Float or BFloat16, got ",
                                                 c10::toString(t.scalar_type())));
}

// Whether this build launches kernels on `device` (checked before anything is allocated).
absl::Status CheckDevice(const char* op, const torch::Device& device) {
  if (device.is_cpu()) return absl::OkStatus();
  std::string why = "the kernels run on CPU and CUDA tensors only";
  if (device.is_cuda()) {
    why = CudaUnavailableReason();
    if (why.empty()) return absl::OkStatus();
  }
  return absl::FailedPreconditionError(
      absl::StrCat("kernel_ops::", op, ": tensors on ", device.str(), ": ", why));
}

// Sizes the kernels take as int32.
absl::Status FitsInt32(const char* op, const char* what, int64_t v) {
  if (v <= std::numeric_limits<int32_t>::max()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("kernel_ops::", op, ": ", what, " = ", v, " exceeds the kernels' int32 range"));
}

#if RLFORGE_KERNEL_OPS_CUDA
int DeviceLaunch(const kernels::KvWriteArgs& a, const torch::Device&, void* stream) {
  return kernels::cuda::LaunchKvWrite(a, stream);
}
int DeviceLaunch(const kernels::PagedAttentionArgs& a, const torch::Device& device, void* stream) {
  // Freed at return: the caching allocator reuses it only after this stream's work.
  torch::Tensor workspace =
      torch::empty({std::max<int64_t>(kernels::cuda::PagedAttentionWorkspaceBytes(a), 1)},
                   torch::dtype(torch::kUInt8).device(device));
  return kernels::cuda::LaunchPagedAttention(a, workspace.data_ptr(), stream);
}
int DeviceLaunch(const kernels::SampleArgs& a, const torch::Device&, void* stream) {
  return kernels::cuda::LaunchSample(a, stream);
}
int DeviceLaunch(const kernels::RmsNormArgs& a, const torch::Device&, void* stream) {
  return kernels::cuda::LaunchRmsNorm(a, stream);
}
int DeviceLaunch(const kernels::RopeArgs& a, const torch::Device&, void* stream) {
  return kernels::cuda::LaunchRope(a, stream);
}
int DeviceLaunch(const kernels::SiluMulArgs& a, const torch::Device&, void* stream) {
  return kernels::cuda::LaunchSiluMul(a, stream);
}
#endif

// Runs one kernel on `device`: its CPU reference, or its CUDA launch on the current stream.
template <typename Args>
absl::Status Run(const char* op, const torch::Device& device, const Args& a,
                 void (*reference)(const Args&)) {
  if (device.is_cpu()) {
    reference(a);
    return absl::OkStatus();
  }
#if RLFORGE_KERNEL_OPS_CUDA
  if (device.is_cuda()) {
    const c10::cuda::CUDAGuard guard(device);
    void* stream = c10::cuda::getCurrentCUDAStream(device.index()).stream();
    if (const int e = DeviceLaunch(a, device, stream); e != 0) {
      return absl::InternalError(
          absl::StrCat("kernel_ops::", op, ": launch failed: ", kernels::cuda::ErrorText(e)));
    }
    return absl::OkStatus();
  }
#endif
  return CheckDevice(op, device);  // a device this build cannot launch on: why
}

torch::Tensor IndexTensor(const void* data, int64_t n, torch::ScalarType type,
                          const torch::Device& device) {
  // from_blob does not own the vector's memory: clone (CPU) or copy (CUDA) it out.
  torch::Tensor host = torch::from_blob(const_cast<void*>(data), {n}, torch::dtype(type));
  return device.is_cpu() ? host.clone() : host.to(device);
}

}  // namespace

std::string CudaUnavailableReason() {
  static const std::string why = []() -> std::string {  // asked before every CUDA launch
#if !RLFORGE_KERNEL_OPS_TORCH_CUDA
    return "this build's libtorch has no CUDA (a CPU libtorch such as Debian's); the engine's CUDA "
           "path needs -DRLFORGE_CUDA=ON against the torch wheel's libtorch";
#elif !RLFORGE_KERNEL_OPS_CUDA
    return "this build has no CUDA kernel library (RLFORGE_CUDA=OFF, or no nvcc found)";
#else
    if (!torch::cuda::is_available()) return "no usable CUDA device (torch::cuda::is_available())";
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess)
      return "cannot read device 0's properties";
    if (prop.major < 9) {  // the kernels are compiled for sm_90 only
      return absl::StrCat(prop.name, " is compute capability ", prop.major, ".", prop.minor,
                          "; the kernels are built for sm_90");
    }
    return "";
#endif
  }();
  return why;
}

absl::StatusOr<PagedIndex> ToDevice(const PagedBatch& b, const torch::Device& device) {
  const char* op = "ToDevice";
  const int64_t rows = static_cast<int64_t>(b.row_seq.size());
  const int64_t seqs = static_cast<int64_t>(b.table_start.size()) - 1;
  if (b.row_context.size() != b.row_seq.size() || b.row_slot.size() != b.row_seq.size() ||
      seqs < 0 ||
      (!b.seq_skip_from.empty() && (static_cast<int64_t>(b.seq_skip_from.size()) != seqs ||
                                    b.seq_skip.size() != b.seq_skip_from.size()))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel_ops::", op, ": inconsistent PagedBatch: ", rows, " row_seq, ", b.row_context.size(),
        " row_context, ", b.row_slot.size(), " row_slot, ", seqs, " sequences, ",
        b.seq_skip_from.size(), " seq_skip_from, ", b.seq_skip.size(), " seq_skip"));
  }
  RETURN_IF_ERROR(CheckDevice(op, device));
  if (b.block_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel_ops::", op, ": block_size = ", b.block_size, " must be positive"));
  }
  return CallCatching(
      [&]() -> absl::StatusOr<PagedIndex> {
        PagedIndex x;
        x.row_seq = IndexTensor(b.row_seq.data(), rows, torch::kInt32, device);
        x.row_context = IndexTensor(b.row_context.data(), rows, torch::kInt32, device);
        x.row_slot = IndexTensor(b.row_slot.data(), rows, torch::kInt64, device);
        x.tables = IndexTensor(b.tables.data(), static_cast<int64_t>(b.tables.size()),
                               torch::kInt32, device);
        x.table_start = IndexTensor(b.table_start.data(), seqs + 1, torch::kInt32, device);
        if (!b.seq_skip_from.empty()) {
          x.seq_skip_from = IndexTensor(b.seq_skip_from.data(), seqs, torch::kInt64, device);
          x.seq_skip = IndexTensor(b.seq_skip.data(), seqs, torch::kInt64, device);
        }
        x.block_size = b.block_size;
        for (int32_t c : b.row_context) x.max_context = std::max(x.max_context, c);
        return x;
      },
      "kernel_ops::ToDevice: ");
}

absl::Status WriteKv(const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& slots,
                     torch::Tensor& k_pool, torch::Tensor& v_pool) {
  const char* op = "WriteKv";
  ASSIGN_OR_RETURN(const DType dtype, FloatDType(op, "k", k));
  RETURN_IF_ERROR(CheckDevice(op, k.device()));
  const torch::Device device = k.device();
  const int64_t rows = k.dim() == 3 ? k.size(0) : -1;
  RETURN_IF_ERROR(Check(op, "k", k, device, k.scalar_type(), {-1, -1, -1}));
  const int64_t kv_heads = k.size(1), dim = k.size(2);
  RETURN_IF_ERROR(Check(op, "v", v, device, k.scalar_type(), {rows, kv_heads, dim}));
  RETURN_IF_ERROR(Check(op, "slots", slots, device, torch::kInt64, {rows}));
  RETURN_IF_ERROR(Check(op, "k_pool", k_pool, device, k.scalar_type(), {-1, -1, kv_heads, dim}));
  RETURN_IF_ERROR(Check(op, "v_pool", v_pool, device, k.scalar_type(), k_pool.sizes().vec()));
  RETURN_IF_ERROR(FitsInt32(op, "rows", rows));
  kernels::KvWriteArgs a;
  a.k = k.data_ptr(), a.v = v.data_ptr(), a.k_pool = k_pool.data_ptr();
  a.v_pool = v_pool.data_ptr(), a.slots = slots.data_ptr<int64_t>();
  a.rows = static_cast<int32_t>(rows), a.num_kv_heads = static_cast<int32_t>(kv_heads);
  a.head_dim = static_cast<int32_t>(dim), a.dtype = dtype;
  return Run(op, device, a, &kernels::ReferenceKvWrite);
}

absl::StatusOr<torch::Tensor> PagedAttention(const torch::Tensor& q, const torch::Tensor& k_pool,
                                             const torch::Tensor& v_pool, const PagedIndex& index,
                                             float scale) {
  const char* op = "PagedAttention";
  ASSIGN_OR_RETURN(const DType dtype, FloatDType(op, "q", q));
  RETURN_IF_ERROR(CheckDevice(op, q.device()));
  const torch::Device device = q.device();
  const torch::ScalarType type = q.scalar_type();
  RETURN_IF_ERROR(Check(op, "q", q, device, type, {-1, -1, -1}));
  const int64_t rows = q.size(0), heads = q.size(1), dim = q.size(2);
  RETURN_IF_ERROR(Check(op, "k_pool", k_pool, device, type, {-1, index.block_size, -1, dim}));
  RETURN_IF_ERROR(Check(op, "v_pool", v_pool, device, type, k_pool.sizes().vec()));
  const int64_t kv_heads = k_pool.size(2);
  if (heads % kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("kernel_ops::", op, ": q has ", heads,
                                                   " heads, not a multiple of the pools' ",
                                                   kv_heads, " kv heads"));
  }
  RETURN_IF_ERROR(Check(op, "index.row_seq", index.row_seq, device, torch::kInt32, {rows}));
  RETURN_IF_ERROR(Check(op, "index.row_context", index.row_context, device, torch::kInt32, {rows}));
  RETURN_IF_ERROR(Check(op, "index.tables", index.tables, device, torch::kInt32, {-1}));
  RETURN_IF_ERROR(Check(op, "index.table_start", index.table_start, device, torch::kInt32, {-1}));
  const int64_t seqs = index.table_start.size(0) - 1;
  if (index.seq_skip_from.defined() || index.seq_skip.defined()) {
    RETURN_IF_ERROR(
        Check(op, "index.seq_skip_from", index.seq_skip_from, device, torch::kInt64, {seqs}));
    RETURN_IF_ERROR(Check(op, "index.seq_skip", index.seq_skip, device, torch::kInt64, {seqs}));
  }
  RETURN_IF_ERROR(FitsInt32(op, "rows", rows));
  torch::Tensor out = torch::empty_like(q);
  kernels::PagedAttentionArgs a;
  a.q = q.data_ptr(), a.k_pool = k_pool.data_ptr(), a.v_pool = v_pool.data_ptr();
  a.out = out.data_ptr();
  a.row_seq = index.row_seq.data_ptr<int32_t>();
  a.row_context = index.row_context.data_ptr<int32_t>();
  a.tables = index.tables.data_ptr<int32_t>();
  a.table_start = index.table_start.data_ptr<int32_t>();
  if (index.seq_skip_from.defined()) {
    a.seq_skip_from = index.seq_skip_from.data_ptr<int64_t>();
    a.seq_skip = index.seq_skip.data_ptr<int64_t>();
  }
  a.rows = static_cast<int32_t>(rows), a.num_heads = static_cast<int32_t>(heads);
  a.num_kv_heads = static_cast<int32_t>(kv_heads), a.head_dim = static_cast<int32_t>(dim);
  a.block_size = static_cast<int32_t>(index.block_size), a.max_context = index.max_context;
  a.scale = scale, a.dtype = dtype;
  if (rows > 0) RETURN_IF_ERROR(Run(op, device, a, &kernels::ReferencePagedAttention));
  return out;
}

absl::StatusOr<SampledRows> Sample(const torch::Tensor& logits, const SampleSettings& settings) {
  const char* op = "Sample";
  ASSIGN_OR_RETURN(const DType dtype, FloatDType(op, "logits", logits));
  RETURN_IF_ERROR(CheckDevice(op, logits.device()));
  const torch::Device device = logits.device();
  RETURN_IF_ERROR(Check(op, "logits", logits, device, logits.scalar_type(), {-1, -1}));
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  const SampleSettings& p = settings;
  RETURN_IF_ERROR(Check(op, "temperature", p.temperature, device, torch::kFloat32, {rows}));
  RETURN_IF_ERROR(Check(op, "top_k", p.top_k, device, torch::kInt32, {rows}));
  RETURN_IF_ERROR(Check(op, "top_p", p.top_p, device, torch::kFloat32, {rows}));
  RETURN_IF_ERROR(Check(op, "seeds", p.seeds, device, torch::kInt64, {rows}));
  RETURN_IF_ERROR(Check(op, "steps", p.steps, device, torch::kInt64, {rows}));
  RETURN_IF_ERROR(FitsInt32(op, "rows", rows));
  RETURN_IF_ERROR(FitsInt32(op, "vocab", vocab));
  if (vocab == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel_ops::", op, ": logits: expected a vocabulary, got ", ShapeText(logits)));
  }
  SampledRows out;
  out.tokens = torch::empty({rows}, torch::dtype(torch::kInt32).device(device));
  out.logprobs = torch::empty({rows}, torch::dtype(torch::kFloat32).device(device));
  kernels::SampleArgs a;
  a.logits = logits.data_ptr(), a.temperature = p.temperature.data_ptr<float>();
  a.top_k = p.top_k.data_ptr<int32_t>(), a.top_p = p.top_p.data_ptr<float>();
  a.seeds = reinterpret_cast<const uint64_t*>(p.seeds.data_ptr<int64_t>());
  a.steps = p.steps.data_ptr<int64_t>();
  a.tokens = out.tokens.data_ptr<int32_t>(), a.logprobs = out.logprobs.data_ptr<float>();
  a.rows = static_cast<int32_t>(rows), a.vocab = static_cast<int32_t>(vocab), a.dtype = dtype;
  if (rows > 0) RETURN_IF_ERROR(Run(op, device, a, &kernels::ReferenceSample));
  return out;
}

absl::StatusOr<torch::Tensor> RmsNorm(const torch::Tensor& x, torch::Tensor* residual,
                                      const torch::Tensor& weight, float eps) {
  const char* op = "RmsNorm";
  ASSIGN_OR_RETURN(const DType dtype, FloatDType(op, "x", x));
  RETURN_IF_ERROR(CheckDevice(op, x.device()));
  const torch::Device device = x.device();
  RETURN_IF_ERROR(Check(op, "x", x, device, x.scalar_type(), {-1, -1}));
  const int64_t rows = x.size(0), dim = x.size(1);
  if (residual != nullptr) {
    RETURN_IF_ERROR(Check(op, "residual", *residual, device, x.scalar_type(), {rows, dim}));
  }
  RETURN_IF_ERROR(Check(op, "weight", weight, device, x.scalar_type(), {dim}));
  RETURN_IF_ERROR(FitsInt32(op, "rows", rows));
  torch::Tensor out = torch::empty_like(x);
  kernels::RmsNormArgs a;
  a.x = x.data_ptr(), a.residual = residual ? residual->data_ptr() : nullptr;
  a.weight = weight.data_ptr(), a.out = out.data_ptr();
  a.rows = static_cast<int32_t>(rows), a.dim = static_cast<int32_t>(dim), a.eps = eps;
  a.dtype = dtype;
  if (rows > 0) RETURN_IF_ERROR(Run(op, device, a, &kernels::ReferenceRmsNorm));
  return out;
}

absl::Status Rope(torch::Tensor& q, torch::Tensor& k, const torch::Tensor& positions,
                  const torch::Tensor& inv_freq, float attention_factor) {
  const char* op = "Rope";
  ASSIGN_OR_RETURN(const DType dtype, FloatDType(op, "q", q));
  RETURN_IF_ERROR(CheckDevice(op, q.device()));
  const torch::Device device = q.device();
  RETURN_IF_ERROR(Check(op, "q", q, device, q.scalar_type(), {-1, -1, -1}));
  const int64_t rows = q.size(0), dim = q.size(2);
  RETURN_IF_ERROR(Check(op, "k", k, device, q.scalar_type(), {rows, -1, dim}));
  RETURN_IF_ERROR(Check(op, "positions", positions, device, torch::kInt64, {rows}));
  RETURN_IF_ERROR(Check(op, "inv_freq", inv_freq, device, torch::kFloat32, {dim / 2}));
  RETURN_IF_ERROR(FitsInt32(op, "rows", rows));
  kernels::RopeArgs a;
  a.q = q.data_ptr(), a.k = k.data_ptr(), a.positions = positions.data_ptr<int64_t>();
  a.inv_freq = inv_freq.data_ptr<float>();
  a.rows = static_cast<int32_t>(rows), a.num_heads = static_cast<int32_t>(q.size(1));
  a.num_kv_heads = static_cast<int32_t>(k.size(1)), a.head_dim = static_cast<int32_t>(dim);
  a.rotary_dim = static_cast<int32_t>(dim), a.attention_factor = attention_factor;
  a.dtype = dtype;
  return rows > 0 ? Run(op, device, a, &kernels::ReferenceRope) : absl::OkStatus();
}

absl::StatusOr<torch::Tensor> SiluMul(const torch::Tensor& x) {
  const char* op = "SiluMul";
  ASSIGN_OR_RETURN(const DType dtype, FloatDType(op, "x", x));
  RETURN_IF_ERROR(CheckDevice(op, x.device()));
  RETURN_IF_ERROR(Check(op, "x", x, x.device(), x.scalar_type(), {-1, -1}));
  const int64_t rows = x.size(0), inner = x.size(1) / 2;
  if (x.size(1) % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel_ops::", op,
                     ": x: expected an even last dimension (gate, then up), got ", ShapeText(x)));
  }
  RETURN_IF_ERROR(FitsInt32(op, "rows", rows));
  torch::Tensor out = torch::empty({rows, inner}, x.options());
  kernels::SiluMulArgs a;
  a.x = x.data_ptr(), a.out = out.data_ptr();
  a.rows = static_cast<int32_t>(rows), a.inner = static_cast<int32_t>(inner), a.dtype = dtype;
  if (rows > 0) RETURN_IF_ERROR(Run(op, x.device(), a, &kernels::ReferenceSiluMul));
  return out;
}

models::TransformerImpl::IncrementalKernels ModelKernels() {
  auto value = [](absl::StatusOr<torch::Tensor> v) {
    if (!v.ok()) throw std::runtime_error(Msg(v.status()));
    return *std::move(v);
  };
  models::TransformerImpl::IncrementalKernels k;
  k.rms_norm = [value](const torch::Tensor& x, torch::Tensor* residual, const torch::Tensor& w,
                       float eps) { return value(RmsNorm(x, residual, w, eps)); };
  k.rope = [](torch::Tensor& q, torch::Tensor& key, const torch::Tensor& positions,
              const torch::Tensor& inv_freq, float attention_factor) {
    const absl::Status s = Rope(q, key, positions, inv_freq, attention_factor);
    if (!s.ok()) throw std::runtime_error(Msg(s));
  };
  k.silu_mul = [value](const torch::Tensor& x) { return value(SiluMul(x)); };
  return k;
}

}  // namespace rlforge::kernel_ops
