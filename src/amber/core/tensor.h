// Tensor: a typed, strided view of shared storage on one device. Views (reshape,
// slice, transpose) share storage and cost nothing; ops state whether they accept
// non-contiguous input, and most require contiguous row-major tensors.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <ostream>
#include <vector>

#include "amber/core/allocator.h"
#include "amber/core/device.h"
#include "amber/core/dtype.h"
#include "amber/core/error.h"
#include "amber/core/shape.h"

namespace amber {

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<uint16_t>() { return DType::u16; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::u8; }

class Tensor {
 public:
  Tensor() = default;  // undefined: defined() is false
  Tensor(std::shared_ptr<Storage> storage, Shape shape, DType dtype, int64_t offset = 0);

  static Tensor empty(Shape shape, DType dtype, Device device = Device::cpu());
  static Tensor zeros(Shape shape, DType dtype, Device device = Device::cpu());
  static Tensor full(Shape shape, double value, DType dtype);  // CPU
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, Shape shape) {
    AMBER_CHECK(shape.numel() == static_cast<int64_t>(values.size()), "from_vector: ",
                values.size(), " values do not fill shape ", shape);
    Tensor t = empty(shape, dtype_of<T>());
    std::copy(values.begin(), values.end(), t.data<T>());
    return t;
  }

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return shape_.ndim(); }
  int64_t size(int dim) const { return shape_[dim < 0 ? dim + ndim() : dim]; }
  int64_t stride(int dim) const { return strides_[dim < 0 ? dim + ndim() : dim]; }
  int64_t numel() const { return shape_.numel(); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device : Device::cpu(); }
  int64_t offset() const { return offset_; }
  bool is_contiguous() const;
  bool shares_storage_with(const Tensor& other) const { return storage_ == other.storage_; }

  void* raw() const;
  template <class T>
  T* data() const {
    AMBER_CHECK(dtype_ == dtype_of<T>(), "tensor holds ", dtype_name(dtype_), ", read as ",
                dtype_name(dtype_of<T>()));
    return static_cast<T*>(raw());
  }

  // Views (share storage).
  Tensor view(Shape shape) const;                       // contiguous only
  Tensor slice(int dim, int64_t start, int64_t end) const;
  Tensor select(int dim, int64_t index) const;          // drops `dim`
  Tensor transpose(int a, int b) const;

  // Copies.
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;
  // Same shape; converts dtype and crosses devices (contiguous tensors); strided views
  // on the CPU, and on one GPU in one dtype when the last dimension is contiguous.
  void copy_from(const Tensor& src);
  void fill(double value);            // any device (a kernel on a GPU when contiguous)
  void zero();

  double item(int64_t flat_index = 0) const;  // CPU, contiguous; for tests and logging
  std::vector<double> to_doubles() const;     // CPU copy of every element, row-major

 private:
  std::shared_ptr<Storage> storage_;
  Shape shape_;
  std::array<int64_t, kMaxDims> strides_{};
  DType dtype_ = DType::f32;
  int64_t offset_ = 0;
};

void require_same_shape(const Tensor& a, const Tensor& b, const char* what);
void require_contiguous(const Tensor& t, const char* what);

}  // namespace amber
