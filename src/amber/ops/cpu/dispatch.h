// Shared plumbing of the CPU ops: run a kernel templated on its compute type.
// f64 tensors compute in double (the gradient-check path); f32 in float; bf16 and
// f16 are widened to float, computed, and rounded back once on output.
#pragma once

#include <utility>

#include "amber/core/tensor.h"

namespace amber::cpu {

// Calls fn.template operator()<T>() with T = double for f64 and float otherwise.
template <class Fn>
decltype(auto) with_compute_type(DType dtype, Fn&& fn) {
  if (dtype == DType::f64) return fn.template operator()<double>();
  AMBER_CHECK(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16,
              "CPU ops compute in f64, f32, bf16 or f16; got ", dtype_name(dtype));
  return fn.template operator()<float>();
}

// A contiguous view of `t` in compute type T: `t` itself when it already is one,
// else a widened copy.
template <class T>
Tensor widened(const Tensor& t) {
  if (t.dtype() == dtype_of<T>() && t.is_contiguous()) return t;
  return t.contiguous().to(dtype_of<T>());
}

// An output buffer in compute type T for `out`; call store() when done to round
// back into `out` if it is narrower, or to scatter into it if it is a strided view.
template <class T>
class Output {
 public:
  explicit Output(Tensor& out, bool accumulate = false) : out_(out) {
    if (out.dtype() == dtype_of<T>() && out.is_contiguous()) {
      buffer_ = out;
    } else {
      buffer_ = accumulate ? out.contiguous().to(dtype_of<T>()) : Tensor::empty(out.shape(), dtype_of<T>());
    }
  }
  T* data() { return buffer_.template data<T>(); }
  void store() {
    if (!buffer_.shares_storage_with(out_)) out_.copy_from(buffer_);
  }

 private:
  Tensor& out_;
  Tensor buffer_;
};

inline void require_cpu(const Tensor& t, const char* op) {
  AMBER_CHECK(t.device().is_cpu(), op, " has no CUDA kernel yet; run it on the CPU");
}

}  // namespace amber::cpu
