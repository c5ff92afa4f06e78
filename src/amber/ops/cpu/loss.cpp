// CPU chunked linear cross-entropy. Each chunk computes its logits with one GEMM,
// reduces them to per-token losses, and (in the backward) turns them in place into
// d(loss)/d(logits) before two GEMMs into dx and dw.
#include "amber/ops/cpu/loss.h"

#include <cmath>

#include "amber/ops/cpu/dispatch.h"
#include "amber/ops/gemm.h"

namespace amber::cpu {
namespace {

// Validated up front: an exception must never leave an OpenMP region.
void check_targets(const Tensor& targets, int64_t vocab, int32_t ignore, const char* op) {
  const int32_t* p = targets.data<int32_t>();
  for (int64_t t = 0; t < targets.numel(); ++t)
    AMBER_CHECK(p[t] == ignore || (p[t] >= 0 && p[t] < vocab), op, ": target ", p[t], " at token ",
                t, " is outside the vocabulary [0, ", vocab, ") and is not the ignore index ", ignore);
}

}  // namespace

void linear_cross_entropy_forward(const Tensor& x, const Tensor& w, const Tensor& targets,
                                  const CrossEntropyOptions& o, Tensor& losses, Tensor& lse) {
  const char* op = "linear_cross_entropy_forward";
  const int64_t tokens = x.size(0), vocab = w.size(0);
  check_targets(targets, vocab, o.ignore_index, op);
  const int32_t* tg = targets.data<int32_t>();
  with_compute_type(x.dtype(), [&]<class T>() {
    const Tensor xw = widened<T>(x), ww = widened<T>(w);
    Output<T> lo(losses), so(lse);
    T *pl = lo.data(), *ps = so.data();
    const int64_t chunk = std::min(o.chunk_tokens, std::max<int64_t>(tokens, 1));
    Tensor logits = Tensor::empty({chunk, vocab}, dtype_of<T>());
    for (int64_t t0 = 0; t0 < tokens; t0 += chunk) {
      const int64_t rows = std::min(chunk, tokens - t0);
      Tensor block = logits.slice(0, 0, rows);
      amber::gemm(xw.slice(0, t0, t0 + rows), false, ww, true, block);
      const T* pz = block.data<T>();
#pragma omp parallel for if (rows * vocab > 65536)
      for (int64_t r = 0; r < rows; ++r) {
        const T* z = pz + r * vocab;
        T m = z[0];
        for (int64_t v = 1; v < vocab; ++v) m = std::max(m, z[v]);
        T s = 0;
        for (int64_t v = 0; v < vocab; ++v) s += std::exp(z[v] - m);
        const T l = m + std::log(s);
        const int64_t t = t0 + r;
        const int32_t y = tg[t];
        ps[t] = l;
        pl[t] = y == o.ignore_index ? T(0) : l - z[y] + static_cast<T>(o.z_loss_weight) * l * l;
      }
    }
    lo.store();
    so.store();
  });
}

void linear_cross_entropy_backward(const Tensor& dlosses, const Tensor& x, const Tensor& w,
                                   const Tensor& targets, const Tensor& lse,
                                   const CrossEntropyOptions& o, Tensor& dx, Tensor& dw, bool accumulate_dw) {
  const char* op = "linear_cross_entropy_backward";
  const int64_t tokens = x.size(0), vocab = w.size(0);
  check_targets(targets, vocab, o.ignore_index, op);
  const int32_t* tg = targets.data<int32_t>();
  with_compute_type(x.dtype(), [&]<class T>() {
    const Tensor xw = widened<T>(x), ww = widened<T>(w);
    const Tensor gl = widened<T>(dlosses), sl = widened<T>(lse);
    const T *pg = gl.data<T>(), *ps = sl.data<T>();
    // Work in T directly inside dx and dw when they already have that type.
    Tensor dx_t = dx.dtype() == dtype_of<T>() ? dx : Tensor::empty(x.shape(), dtype_of<T>());
    Tensor dw_t = dw.dtype() == dtype_of<T>() ? dw
                  : accumulate_dw               ? dw.to(dtype_of<T>())
                                                : Tensor::empty(dw.shape(), dtype_of<T>());
    if (!accumulate_dw && tokens == 0) dw_t.zero();  // no chunk writes it
    require_contiguous(dx_t, op);
    require_contiguous(dw_t, op);
    const int64_t chunk = std::min(o.chunk_tokens, std::max<int64_t>(tokens, 1));
    Tensor logits = Tensor::empty({chunk, vocab}, dtype_of<T>());
    for (int64_t t0 = 0; t0 < tokens; t0 += chunk) {
      const int64_t rows = std::min(chunk, tokens - t0);
      Tensor block = logits.slice(0, 0, rows);
      const Tensor xs = xw.slice(0, t0, t0 + rows);
      amber::gemm(xs, false, ww, true, block);
      T* pz = block.data<T>();
      // d/dz of (lse - z_y + c*lse^2) = softmax * (1 + 2c*lse) - onehot(y)
#pragma omp parallel for if (rows * vocab > 65536)
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t t = t0 + r;
        const int32_t y = tg[t];
        T* z = pz + r * vocab;
        if (y == o.ignore_index) {
          for (int64_t v = 0; v < vocab; ++v) z[v] = 0;
          continue;
        }
        const T l = ps[t], g = pg[t];
        const T scale = g * (T(1) + T(2) * static_cast<T>(o.z_loss_weight) * l);
        for (int64_t v = 0; v < vocab; ++v) z[v] = std::exp(z[v] - l) * scale;
        z[y] -= g;
      }
      Tensor dxs = dx_t.slice(0, t0, t0 + rows);
      amber::gemm(block, false, ww, false, dxs);
      amber::gemm(block, true, xs, false, dw_t, 1.0, accumulate_dw || t0 > 0 ? 1.0 : 0.0);
    }
    if (!dx_t.shares_storage_with(dx)) dx.copy_from(dx_t);
    if (!dw_t.shares_storage_with(dw)) dw.copy_from(dw_t);
  });
}

// The loss the trainer logs has always been this sum: f32 (or f64) per-token values
// widened exactly to double and added in token order, so CPU runs keep their bits.
void linear_cross_entropy_sums(const Tensor& losses, const Tensor& lse, const Tensor& targets,
                               const CrossEntropyOptions& o, Tensor& sums) {
  with_compute_type(losses.dtype(), [&]<class T>() {
    const Tensor lw = widened<T>(losses), ew = widened<T>(lse);
    const T *l = lw.data<T>(), *e = ew.data<T>();
    const int32_t* y = targets.data<int32_t>();
    double loss = 0, z_loss = 0, count = 0;
    for (int64_t t = 0; t < losses.numel(); ++t) {
      if (y[t] == o.ignore_index) continue;
      const double lse_t = static_cast<double>(e[t]);
      loss += static_cast<double>(l[t]);
      z_loss += o.z_loss_weight * lse_t * lse_t;
      count += 1;
    }
    double* s = sums.data<double>();
    s[step_slot::loss_sum] += loss;
    s[step_slot::z_loss_sum] += z_loss;
    s[step_slot::trained_tokens] += count;
  });
}

}  // namespace amber::cpu
