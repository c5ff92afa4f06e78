// The 16-bit m-grouped products (forward, SwiGLU forward, input gradient) on the Hopper
// kernel of grouped_m.cuh, and the switches the benchmarks' A/B sets.
#include "amber/ops/cuda/grouped/grouped_m.cuh"

namespace amber::cuda {
namespace {

using grouped::Args;
using grouped::Epilogue;
using grouped::Plain;

template <class T, Epilogue kE, bool kTransB>
void launch(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor* gate_up, const Args<T>& a,
            const char* op) {
  if (grouped::wide_tiles<Plain<T>, kE>(a))
    grouped::launch_tiles<Plain<T>, kE, 256, kTransB>(x, w, y, gate_up, a, op);
  else
    grouped::launch_tiles<Plain<T>, kE, 128, kTransB>(x, w, y, gate_up, a, op);
}

// Runs fn with the 16-bit element type of x, after the checks every product shares.
template <class Fn>
void with_16bit(const Tensor& x, int64_t experts, const char* op, Fn&& fn) {
  grouped::check_supported(x, static_cast<int>(experts), op);
  if (x.dtype() == DType::bf16)
    fn(__nv_bfloat16{});
  else if (x.dtype() == DType::f16)
    fn(__half{});
  else
    fail(op, ": GPU grouped products take bf16 or f16, got ", dtype_name(x.dtype()));
}

}  // namespace

void grouped_gemm_forward(const Tensor& x, const Tensor& w, const Tensor& offsets, Tensor& y, const Tensor& row_scale) {
  const char* op = "grouped_gemm_forward";
  with_16bit(x, w.size(0), op, [&](auto tag) {
    using T = decltype(tag);
    const int n = static_cast<int>(w.size(1));
    Args<T> a{};
    a.offsets = static_cast<const int*>(offsets.raw());
    a.experts = static_cast<int>(w.size(0));
    a.rows = static_cast<int>(x.size(0));
    a.n_out = a.w_rows_per_expert = a.y_cols = n;
    a.k = static_cast<int>(x.size(1));
    a.y = static_cast<T*>(y.raw());
    if (row_scale.defined()) {
      a.row_scale = static_cast<const float*>(row_scale.raw());
      launch<T, Epilogue::row_scale, false>(x, w, y, nullptr, a, op);
    } else {
      launch<T, Epilogue::plain, false>(x, w, y, nullptr, a, op);
    }
  });
}

void grouped_gemm_swiglu_forward(const Tensor& x, const Tensor& w, const Tensor& offsets, Tensor& gate_up, Tensor& h) {
  const char* op = "grouped_gemm_swiglu_forward";
  with_16bit(x, w.size(0), op, [&](auto tag) {
    using T = decltype(tag);
    Args<T> a{};
    a.offsets = static_cast<const int*>(offsets.raw());
    a.experts = static_cast<int>(w.size(0));
    a.rows = static_cast<int>(x.size(0));
    a.n_out = a.w_rows_per_expert = static_cast<int>(w.size(1));
    a.k = static_cast<int>(x.size(1));
    a.y = static_cast<T*>(h.raw());
    a.y_cols = a.n_out / 2;
    a.gate_up = gate_up.defined() ? static_cast<T*>(gate_up.raw()) : nullptr;
    launch<T, Epilogue::swiglu, false>(x, w, h, gate_up.defined() ? &gate_up : nullptr, a, op);
  });
}

void grouped_gemm_backward_input(const Tensor& dy, const Tensor& w, const Tensor& offsets, Tensor& dx) {
  const char* op = "grouped_gemm_backward_input";
  with_16bit(dy, w.size(0), op, [&](auto tag) {
    using T = decltype(tag);
    Args<T> a{};
    a.offsets = static_cast<const int*>(offsets.raw());
    a.experts = static_cast<int>(w.size(0));
    a.rows = static_cast<int>(dy.size(0));
    a.n_out = a.y_cols = static_cast<int>(w.size(2));
    a.k = a.w_rows_per_expert = static_cast<int>(w.size(1));
    a.y = static_cast<T*>(dx.raw());
    launch<T, Epilogue::plain, true>(dy, w, dx, nullptr, a, op);
  });
}

bool grouped_gemm_available(int device) {
#if defined(AMBER_HOPPER_KERNELS)
  return compute_major(device) == 9;
#else
  (void)device;
  return false;
#endif
}

GroupedVariant& grouped_variant() {
  static GroupedVariant variant;
  return variant;
}

}  // namespace amber::cuda
