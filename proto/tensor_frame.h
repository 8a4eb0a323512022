// TensorFrame: a named n-d array whose bytes live in a ZeroMQ message.
//
// This is the data plane's unit: the header (name, dtype, shape) travels in the
// envelope's TensorMeta, the bytes travel as their own frame, so a tensor is
// never copied into or out of protobuf. Borrow() wraps caller memory without a
// copy; the release callback runs (possibly on a ZeroMQ I/O thread) once the
// bytes have been sent. Not thread-safe; move it between threads, do not share.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/check.h"
#include "proto/control.pb.h"
#include "zmq.hpp"

namespace rlforge {

using proto::DType;

// Bytes per element; 0 for DTYPE_UNSPECIFIED or unknown values.
size_t DTypeSize(DType dtype);
// "f32", "bf16", ...
std::string DTypeName(DType dtype);

template <typename T>
constexpr DType DTypeOf();
template <>
constexpr DType DTypeOf<float>() {
  return proto::F32;
}
template <>
constexpr DType DTypeOf<double>() {
  return proto::F64;
}
template <>
constexpr DType DTypeOf<int64_t>() {
  return proto::I64;
}
template <>
constexpr DType DTypeOf<int32_t>() {
  return proto::I32;
}
template <>
constexpr DType DTypeOf<int16_t>() {
  return proto::I16;
}
template <>
constexpr DType DTypeOf<int8_t>() {
  return proto::I8;
}
template <>
constexpr DType DTypeOf<uint8_t>() {
  return proto::U8;
}

// 64-bit FNV-1a, used to check that bytes arrived as they were sent.
uint64_t Fnv1a64(const void* data, size_t size);

class TensorFrame {
 public:
  TensorFrame() = default;
  TensorFrame(TensorFrame&&) = default;
  TensorFrame& operator=(TensorFrame&&) = default;

  // Uninitialised storage for the given shape.
  static TensorFrame Allocate(std::string name, DType dtype, std::vector<int64_t> shape);
  // Copies `data` (numel * DTypeSize(dtype) bytes).
  static TensorFrame Copy(std::string name, DType dtype, std::vector<int64_t> shape,
                          const void* data);
  // Wraps `data` without copying; `release` runs when ZeroMQ is done with it.
  static TensorFrame Borrow(std::string name, DType dtype, std::vector<int64_t> shape, void* data,
                            std::function<void()> release);
  // Adopts a received frame; the caller has checked that the sizes agree.
  static TensorFrame FromMessage(std::string name, DType dtype, std::vector<int64_t> shape,
                                 zmq::message_t message);

  template <typename T>
  static TensorFrame FromVector(std::string name, const std::vector<T>& v) {
    return Copy(std::move(name), DTypeOf<T>(), {static_cast<int64_t>(v.size())}, v.data());
  }

  const std::string& name() const { return name_; }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t numel() const;
  size_t nbytes() const { return message_.size(); }
  void* data() { return message_.data(); }
  const void* data() const { return message_.data(); }

  template <typename T>
  T* data_as() {
    RF_CHECK(DTypeOf<T>() == dtype_) << "tensor " << name_ << " is " << DTypeName(dtype_);
    return static_cast<T*>(message_.data());
  }
  template <typename T>
  const T* data_as() const {
    RF_CHECK(DTypeOf<T>() == dtype_) << "tensor " << name_ << " is " << DTypeName(dtype_);
    return static_cast<const T*>(message_.data());
  }
  template <typename T>
  std::vector<T> ToVector() const {
    const T* p = data_as<T>();
    return std::vector<T>(p, p + numel());
  }

  proto::TensorMeta Meta() const;
  // Gives up the bytes, for sending.
  zmq::message_t TakeMessage() { return std::move(message_); }

 private:
  std::string name_;
  DType dtype_ = proto::DTYPE_UNSPECIFIED;
  std::vector<int64_t> shape_;
  zmq::message_t message_;
};

}  // namespace rlforge
