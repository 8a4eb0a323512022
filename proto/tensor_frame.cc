#include "proto/tensor_frame.h"

#include <cstring>

namespace rlforge {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case proto::F64:
    case proto::I64:
      return 8;
    case proto::F32:
    case proto::I32:
      return 4;
    case proto::F16:
    case proto::BF16:
    case proto::I16:
      return 2;
    case proto::I8:
    case proto::U8:
    case proto::BOOL:
      return 1;
    default:
      return 0;
  }
}

std::string DTypeName(DType dtype) {
  switch (dtype) {
    case proto::F32:
      return "f32";
    case proto::F64:
      return "f64";
    case proto::F16:
      return "f16";
    case proto::BF16:
      return "bf16";
    case proto::I64:
      return "i64";
    case proto::I32:
      return "i32";
    case proto::I16:
      return "i16";
    case proto::I8:
      return "i8";
    case proto::U8:
      return "u8";
    case proto::BOOL:
      return "bool";
    default:
      return "dtype(" + std::to_string(static_cast<int>(dtype)) + ")";
  }
}

uint64_t Fnv1a64(const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; i < size; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

static size_t NumBytes(DType dtype, const std::vector<int64_t>& shape) {
  size_t n = DTypeSize(dtype);
  for (int64_t d : shape) {
    RF_CHECK_GE(d, 0) << "negative dimension";
    n *= static_cast<size_t>(d);
  }
  return n;
}

TensorFrame TensorFrame::Allocate(std::string name, DType dtype, std::vector<int64_t> shape) {
  TensorFrame t;
  t.message_ = zmq::message_t(NumBytes(dtype, shape));
  t.name_ = std::move(name);
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  return t;
}

TensorFrame TensorFrame::Copy(std::string name, DType dtype, std::vector<int64_t> shape,
                              const void* data) {
  TensorFrame t = Allocate(std::move(name), dtype, std::move(shape));
  if (t.nbytes() > 0) std::memcpy(t.data(), data, t.nbytes());
  return t;
}

namespace {
void RunRelease(void* /*data*/, void* hint) {
  auto* fn = static_cast<std::function<void()>*>(hint);
  if (*fn) (*fn)();
  delete fn;
}
}  // namespace

TensorFrame TensorFrame::Borrow(std::string name, DType dtype, std::vector<int64_t> shape,
                                void* data, std::function<void()> release) {
  TensorFrame t;
  size_t n = NumBytes(dtype, shape);
  t.message_ = zmq::message_t(data, n, &RunRelease, new std::function<void()>(std::move(release)));
  t.name_ = std::move(name);
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  return t;
}

TensorFrame TensorFrame::FromMessage(std::string name, DType dtype, std::vector<int64_t> shape,
                                     zmq::message_t message) {
  TensorFrame t;
  t.message_ = std::move(message);
  t.name_ = std::move(name);
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  return t;
}

int64_t TensorFrame::numel() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

proto::TensorMeta TensorFrame::Meta() const {
  proto::TensorMeta m;
  m.set_name(name_);
  m.set_dtype(dtype_);
  for (int64_t d : shape_) m.add_shape(d);
  m.set_nbytes(nbytes());
  return m;
}

}  // namespace rlforge
