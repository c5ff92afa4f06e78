// CPU grouped products: one OpenBLAS product per expert on its rows (ops/cpu/gemm.h),
// into a buffer of the compute type so that epilogues (row scales, SwiGLU) start from
// the unrounded products as the GPU's do, then rounded once into the output.
#include "amber/ops/cpu/grouped_gemm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "amber/ops/cpu/dispatch.h"
#include "amber/ops/cpu/gemm.h"

namespace amber::cpu {
namespace {

// The row ranges of the experts: offsets [E + 1], checked to start at 0, never
// decrease and stay within `rows`.
std::vector<int64_t> expert_rows(const Tensor& offsets, int64_t rows, const char* op) {
  const int32_t* o = offsets.data<int32_t>();
  const int64_t experts = offsets.numel() - 1;
  std::vector<int64_t> out(o, o + experts + 1);
  AMBER_CHECK(out[0] == 0, op, ": offsets[0] is ", out[0], "; expert 0's rows start at row 0");
  for (int64_t e = 0; e < experts; ++e)
    AMBER_CHECK(out[e] <= out[e + 1], op, ": offsets decrease at expert ", e, " (", out[e], " then ", out[e + 1],
                "); rows must be sorted by expert");
  AMBER_CHECK(out[experts] <= rows, op, ": offsets end at row ", out[experts], " but the buffers hold ", rows,
              " rows");
  return out;
}

// dst's rows [begin, end) = src (the compute-type rows of one expert), rounded once.
void store_rows(const Tensor& src, Tensor& dst, int64_t begin, int64_t end) {
  Tensor rows = dst.slice(0, begin, end);
  rows.copy_from(src);
}

template <class T>
T silu(T v) {
  return v / (T(1) + std::exp(-v));
}

}  // namespace

void grouped_gemm_forward(const Tensor& x, const Tensor& w, const Tensor& offsets, Tensor& y, const Tensor& row_scale) {
  const auto rows = expert_rows(offsets, x.size(0), "grouped_gemm_forward");
  with_compute_type(x.dtype(), [&]<class T>() {
    const Tensor scale = row_scale.defined() ? widened<T>(row_scale) : Tensor();
    for (int64_t e = 0; e + 1 < static_cast<int64_t>(rows.size()); ++e) {
      const int64_t begin = rows[e], end = rows[e + 1];
      if (begin == end) continue;
      Tensor acc = Tensor::empty({end - begin, w.size(1)}, dtype_of<T>());
      gemm(x.slice(0, begin, end), false, w.select(0, e), true, acc, 1.0, 0.0, Tensor());
      if (scale.defined()) {
        T* a = acc.data<T>();
        const T* s = scale.data<T>() + begin;
        const int64_t n = acc.size(1);
        for (int64_t r = 0; r < end - begin; ++r)
          for (int64_t j = 0; j < n; ++j) a[r * n + j] *= s[r];
      }
      store_rows(acc, y, begin, end);
    }
  });
}

void grouped_gemm_swiglu_forward(const Tensor& x, const Tensor& w, const Tensor& offsets, Tensor& gate_up, Tensor& h) {
  const auto rows = expert_rows(offsets, x.size(0), "grouped_gemm_swiglu_forward");
  const int64_t width = h.size(1);
  with_compute_type(x.dtype(), [&]<class T>() {
    for (int64_t e = 0; e + 1 < static_cast<int64_t>(rows.size()); ++e) {
      const int64_t begin = rows[e], end = rows[e + 1];
      if (begin == end) continue;
      Tensor acc = Tensor::empty({end - begin, 2 * width}, dtype_of<T>());
      gemm(x.slice(0, begin, end), false, w.select(0, e), true, acc, 1.0, 0.0, Tensor());
      Tensor act = Tensor::empty({end - begin, width}, dtype_of<T>());
      const T* a = acc.data<T>();
      T* o = act.data<T>();
      for (int64_t r = 0; r < end - begin; ++r)
        for (int64_t j = 0; j < width; ++j) o[r * width + j] = silu(a[r * 2 * width + j]) * a[r * 2 * width + width + j];
      if (gate_up.defined()) store_rows(acc, gate_up, begin, end);
      store_rows(act, h, begin, end);
    }
  });
}

void grouped_gemm_backward_input(const Tensor& dy, const Tensor& w, const Tensor& offsets, Tensor& dx) {
  const auto rows = expert_rows(offsets, dy.size(0), "grouped_gemm_backward_input");
  with_compute_type(dy.dtype(), [&]<class T>() {
    for (int64_t e = 0; e + 1 < static_cast<int64_t>(rows.size()); ++e) {
      const int64_t begin = rows[e], end = rows[e + 1];
      if (begin == end) continue;
      Tensor acc = Tensor::empty({end - begin, w.size(2)}, dtype_of<T>());
      gemm(dy.slice(0, begin, end), false, w.select(0, e), false, acc, 1.0, 0.0, Tensor());
      store_rows(acc, dx, begin, end);
    }
  });
}

void grouped_gemm_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& offsets, Tensor& dw,
                                  bool accumulate) {
  const auto rows = expert_rows(offsets, dy.size(0), "grouped_gemm_backward_weight");
  for (int64_t e = 0; e + 1 < static_cast<int64_t>(rows.size()); ++e) {
    const int64_t begin = rows[e], end = rows[e + 1];
    Tensor dw_e = dw.select(0, e);
    if (begin == end) {
      if (!accumulate) dw_e.zero();
      continue;
    }
    gemm(dy.slice(0, begin, end), true, x.slice(0, begin, end), false, dw_e, 1.0, accumulate ? 1.0 : 0.0, Tensor());
  }
}

void block_squares(const Tensor& dw, Tensor& squares) {
  const int64_t experts = dw.size(0), n = dw.size(1), k = dw.size(2);
  const int64_t row_blocks = squares.size(1), col_blocks = squares.size(2);
  const Tensor values = dw.contiguous().to(DType::f64);
  const double* v = values.data<double>();
  double* out = squares.data<double>();
  std::fill_n(out, squares.numel(), 0.0);
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c) {
        const double x = v[(e * n + r) * k + c];
        out[(e * row_blocks + r / 16) * col_blocks + c / 128] += x * x;
      }
}

}  // namespace amber::cpu
