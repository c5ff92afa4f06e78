#include "amber/core/tensor.h"

#include <algorithm>
#include <cstring>

#include "amber/core/cuda_runtime.h"

namespace amber {
namespace {

void set_contiguous_strides(const Shape& shape, std::array<int64_t, kMaxDims>& strides) {
  int64_t s = 1;
  for (int i = shape.ndim() - 1; i >= 0; --i) {
    strides[i] = s;
    s *= shape[i];
  }
}

int wrap_dim(int dim, int ndim) {
  const int d = dim < 0 ? dim + ndim : dim;
  AMBER_CHECK(d >= 0 && d < ndim, "dimension ", dim, " out of range for a ", ndim, "-d tensor");
  return d;
}

}  // namespace

Tensor::Tensor(std::shared_ptr<Storage> storage, Shape shape, DType dtype, int64_t offset)
    : storage_(std::move(storage)), shape_(shape), dtype_(dtype), offset_(offset) {
  set_contiguous_strides(shape_, strides_);
  AMBER_CHECK(static_cast<size_t>(offset + shape.numel()) * dtype_size(dtype) <= storage_->bytes,
              "tensor of shape ", shape, " at offset ", offset, " does not fit its storage of ",
              storage_->bytes, " bytes");
}

Tensor Tensor::empty(Shape shape, DType dtype, Device device) {
  return Tensor(allocate_storage(static_cast<size_t>(shape.numel()) * dtype_size(dtype), device),
                shape, dtype);
}

Tensor Tensor::zeros(Shape shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.zero();
  return t;
}

Tensor Tensor::full(Shape shape, double value, DType dtype) {
  Tensor t = empty(shape, dtype);
  t.fill(value);
  return t;
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int i = ndim() - 1; i >= 0; --i) {
    if (shape_[i] != 1 && strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

void* Tensor::raw() const {
  AMBER_CHECK(defined(), "use of an undefined tensor");
  return static_cast<char*>(storage_->data) + offset_ * static_cast<int64_t>(dtype_size(dtype_));
}

Tensor Tensor::view(Shape shape) const {
  AMBER_CHECK(is_contiguous(), "view ", shape, " needs a contiguous tensor, got shape ", shape_);
  AMBER_CHECK(shape.numel() == numel(), "cannot view ", shape_, " as ", shape, ": ", numel(),
              " vs ", shape.numel(), " elements");
  Tensor t = *this;
  t.shape_ = shape;
  set_contiguous_strides(shape, t.strides_);
  return t;
}

Tensor Tensor::slice(int dim, int64_t start, int64_t end) const {
  const int d = wrap_dim(dim, ndim());
  AMBER_CHECK(0 <= start && start <= end && end <= shape_[d], "slice [", start, ", ", end,
              ") out of range for dimension ", d, " of size ", shape_[d]);
  Tensor t = *this;
  t.shape_[d] = end - start;
  t.offset_ += start * strides_[d];
  return t;
}

Tensor Tensor::select(int dim, int64_t index) const {
  const int d = wrap_dim(dim, ndim());
  AMBER_CHECK(0 <= index && index < shape_[d], "index ", index, " out of range for dimension ", d,
              " of size ", shape_[d]);
  Tensor t = *this;
  t.offset_ += index * strides_[d];
  t.shape_ = Shape();
  int n = 0;
  for (int i = 0; i < ndim(); ++i) {
    if (i == d) continue;
    t.shape_.push_back(shape_[i]);
    t.strides_[n++] = strides_[i];
  }
  return t;
}

Tensor Tensor::transpose(int a, int b) const {
  const int da = wrap_dim(a, ndim()), db = wrap_dim(b, ndim());
  Tensor t = *this;
  std::swap(t.shape_[da], t.shape_[db]);
  std::swap(t.strides_[da], t.strides_[db]);
  return t;
}

namespace {

// Calls fn(element_offset) for every element of `t` in row-major order.
template <class Fn>
void for_each_offset(const Shape& shape, const std::array<int64_t, kMaxDims>& strides, Fn fn) {
  const int n = shape.ndim();
  if (shape.numel() == 0) return;
  std::array<int64_t, kMaxDims> index{};
  int64_t offset = 0;
  while (true) {
    fn(offset);
    int d = n - 1;
    for (; d >= 0; --d) {
      if (++index[d] < shape[d]) {
        offset += strides[d];
        break;
      }
      offset -= (shape[d] - 1) * strides[d];
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

// dst = src on the CPU for views of one shape and dtype whose rows (the last dimension)
// are contiguous on both sides: a memcpy per row, rows in parallel. Element by element,
// a [2048, 8, 64] slice of a stacked projection took milliseconds on one thread.
void copy_rows_cpu(char* dst, const std::array<int64_t, kMaxDims>& dst_strides, const char* src,
                   const std::array<int64_t, kMaxDims>& src_strides, const Shape& shape, size_t element) {
  const int n = shape.ndim();
  const int64_t cols = shape[n - 1], rows = cols > 0 ? shape.numel() / cols : 0;
#pragma omp parallel for if (shape.numel() > (1 << 16))
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rest = r, to = 0, from = 0;
    for (int d = n - 2; d >= 0; --d) {
      const int64_t i = rest % shape[d];
      rest /= shape[d];
      to += i * dst_strides[d];
      from += i * src_strides[d];
    }
    std::memcpy(dst + to * static_cast<int64_t>(element), src + from * static_cast<int64_t>(element),
                static_cast<size_t>(cols) * element);
  }
}

}  // namespace

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape_, dtype_, device());
  out.copy_from(*this);
  return out;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return *this;
  Tensor out = empty(shape_, dtype, device());
  out.copy_from(*this);
  return out;
}

Tensor Tensor::to(Device device) const {
  if (device == this->device()) return *this;
  Tensor out = empty(shape_, dtype_, device);
  out.copy_from(*this);
  return out;
}

void Tensor::copy_from(const Tensor& src) {
  AMBER_CHECK(src.shape() == shape_, "copy_from: shape ", src.shape(), " into ", shape_);
  if (src.device() == device() && device().is_cpu()) {
    if (src.is_contiguous() && is_contiguous()) {
      convert(src.raw(), src.dtype(), raw(), dtype_, static_cast<size_t>(numel()));
      return;
    }
    if (src.dtype() == dtype_ && ndim() > 0 && stride(-1) == 1 && src.stride(-1) == 1) {
      copy_rows_cpu(static_cast<char*>(raw()), strides_, static_cast<const char*>(src.raw()), src.strides_, shape_,
                    dtype_size(dtype_));
      return;
    }
    // Strided: gather into a contiguous buffer of the source type, then convert.
    Tensor packed = src.is_contiguous() ? src : empty(shape_, src.dtype());
    if (!src.is_contiguous()) {
      const size_t es = dtype_size(src.dtype());
      char* dst = static_cast<char*>(packed.raw());
      const char* base = static_cast<const char*>(src.raw());
      for_each_offset(shape_, src.strides_, [&](int64_t off) {
        std::memcpy(dst, base + off * static_cast<int64_t>(es), es);
        dst += es;
      });
    }
    if (is_contiguous()) {
      convert(packed.raw(), packed.dtype(), raw(), dtype_, static_cast<size_t>(numel()));
      return;
    }
    Tensor converted = packed.to(dtype_);
    const size_t es = dtype_size(dtype_);
    const char* from = static_cast<const char*>(converted.raw());
    char* base = static_cast<char*>(raw());
    for_each_offset(shape_, strides_, [&](int64_t off) {
      std::memcpy(base + off * static_cast<int64_t>(es), from, es);
      from += es;
    });
    return;
  }
  // Strided views on one GPU: row by row (the last dimension contiguous on both sides).
  if (src.device() == device() && src.dtype() == dtype_ && !(src.is_contiguous() && is_contiguous()) &&
      ndim() > 0 && stride(-1) == 1 && src.stride(-1) == 1) {
    std::array<int64_t, kMaxDims> dims{};
    for (int d = 0; d < ndim(); ++d) dims[d] = shape_[d];
    cuda::copy_rows(raw(), strides_.data(), src.raw(), src.strides_.data(), dims.data(), ndim(), dtype_size(dtype_));
    return;
  }
  // Across devices: move contiguous bytes, converting dtype on the host side.
  AMBER_CHECK(src.is_contiguous() && is_contiguous(),
              "copies between devices need contiguous tensors; call contiguous() first");
  if (src.dtype() == dtype_) {
    copy_bytes(raw(), device(), src.raw(), src.device(), bytes());
    return;
  }
  if (src.device() == device() &&
      cuda::convert(raw(), dtype_, src.raw(), src.dtype(), static_cast<size_t>(numel())))
    return;
  Tensor host_src = src.to(Device::cpu()).to(dtype_);
  copy_bytes(raw(), device(), host_src.raw(), Device::cpu(), bytes());
}

void Tensor::fill(double value) {
  if (device().is_cuda()) {
    // The element is encoded on the host exactly as a CPU fill would store it, then a
    // kernel writes its bits: no copy to wait for (the loss gradient is filled every
    // micro-batch).
    unsigned char element[8] = {};
    store_from_double(element, dtype_, 0, value);
    if (is_contiguous()) {
      cuda::fill(raw(), dtype_size(dtype_), element, static_cast<size_t>(numel()));
      return;
    }
    Tensor host = empty(shape_, dtype_);
    host.fill(value);
    copy_from(host);
    return;
  }
  void* base = raw();
  if (is_contiguous()) {
    for (int64_t i = 0; i < numel(); ++i) store_from_double(base, dtype_, static_cast<size_t>(i), value);
    return;
  }
  for_each_offset(shape_, strides_, [&](int64_t off) {
    store_from_double(base, dtype_, static_cast<size_t>(off), value);
  });
}

void Tensor::zero() {
  if (is_contiguous()) {
    zero_bytes(raw(), device(), bytes());
    return;
  }
  fill(0.0);
}

double Tensor::item(int64_t flat_index) const {
  AMBER_CHECK(device().is_cpu() && is_contiguous(), "item() needs a contiguous CPU tensor");
  AMBER_CHECK(flat_index >= 0 && flat_index < numel(), "item(", flat_index, ") out of range for ",
              numel(), " elements");
  return load_as_double(raw(), dtype_, static_cast<size_t>(flat_index));
}

std::vector<double> Tensor::to_doubles() const {
  Tensor host = to(Device::cpu()).contiguous();
  std::vector<double> out(static_cast<size_t>(numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = load_as_double(host.raw(), dtype_, i);
  return out;
}

void require_same_shape(const Tensor& a, const Tensor& b, const char* what) {
  AMBER_CHECK(a.shape() == b.shape(), what, ": shapes ", a.shape(), " and ", b.shape(), " differ");
}

void require_contiguous(const Tensor& t, const char* what) {
  AMBER_CHECK(t.is_contiguous(), what, " needs a contiguous tensor (shape ", t.shape(),
              "); call contiguous() first");
}

}  // namespace amber
