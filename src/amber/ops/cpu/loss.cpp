// CPU chunked linear cross-entropy. Each chunk computes its logits with one GEMM,
// reduces them to per-token losses, and (in the backward) turns them in place into
// d(loss)/d(logits) before two GEMMs into dx and dw. The training step's call does
// both in one walk, computing each chunk's logits once.
#include "amber/ops/cpu/loss.h"

#include <cmath>

#include "amber/ops/cpu/dispatch.h"
#include "amber/ops/cpu/vector_math.h"
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

// Per row of a logits block: lse = log-sum-exp, loss = lse - z_y + c * lse^2 (0 for
// an ignored target).
template <class T>
AMBER_VECTOR_CLONES void losses_of_rows(const T* pz, int64_t rows, int64_t vocab, const int32_t* tg,
                                        const CrossEntropyOptions& o, T* pl, T* ps) {
#pragma omp parallel for if (rows * vocab > 65536)
  for (int64_t r = 0; r < rows; ++r) {
    const T* z = pz + r * vocab;
    const T m = max_of(z, vocab);
    const T l = m + std::log(fixed_order_sum_of<T>(vocab, [&](int64_t v) { return exp_lanes(z[v] - m); }));
    const int32_t y = tg[r];
    ps[r] = l;
    pl[r] = y == o.ignore_index ? T(0) : l - z[y] + static_cast<T>(o.z_loss_weight) * l * l;
  }
}

// Turns each row of a logits block into d(loss)/d(logits):
// d/dz of (lse - z_y + c*lse^2) = softmax * (1 + 2c*lse) - onehot(y).
template <class T>
AMBER_VECTOR_CLONES void logit_gradients_of_rows(T* pz, int64_t rows, int64_t vocab, const int32_t* tg,
                                                 const CrossEntropyOptions& o, const T* pg, const T* ps) {
#pragma omp parallel for if (rows * vocab > 65536)
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t y = tg[r];
    T* z = pz + r * vocab;
    if (y == o.ignore_index) {
      for (int64_t v = 0; v < vocab; ++v) z[v] = 0;
      continue;
    }
    const T l = ps[r], g = pg[r];
    const T scale = g * (T(1) + T(2) * static_cast<T>(o.z_loss_weight) * l);
    for (int64_t v = 0; v < vocab; ++v) z[v] = exp_lanes(z[v] - l) * scale;
    z[y] -= g;
  }
}

// One walk over the logits in chunks of o.chunk_tokens rows, each computed by one
// GEMM: the forward writes losses and lse; the backward reads dlosses and lse and
// writes dx and dw; both in one walk compute each chunk's logits once, with the same
// arithmetic (and so the same bits) as two walks.
template <class T>
struct LossWalk {
  T *losses = nullptr, *lse = nullptr;                   // the forward's outputs
  const T *dlosses = nullptr, *saved_lse = nullptr;      // the backward's inputs
  Tensor *dx = nullptr, *dw = nullptr;                   // T, contiguous
  bool accumulate_dw = false;
};

template <class T>
void walk_logits(const Tensor& x, const Tensor& w, const int32_t* tg, const CrossEntropyOptions& o,
                 const LossWalk<T>& walk) {
  const int64_t tokens = x.size(0), vocab = w.size(0);
  const bool backward = walk.dx != nullptr;
  if (backward && !walk.accumulate_dw && tokens == 0) walk.dw->zero();  // no chunk writes it
  const int64_t chunk = std::min(o.chunk_tokens, std::max<int64_t>(tokens, 1));
  Tensor logits = Tensor::empty({chunk, vocab}, dtype_of<T>());
  for (int64_t t0 = 0; t0 < tokens; t0 += chunk) {
    const int64_t rows = std::min(chunk, tokens - t0);
    Tensor block = logits.slice(0, 0, rows);
    const Tensor xs = x.slice(0, t0, t0 + rows);
    amber::gemm(xs, false, w, true, block);
    if (walk.losses) losses_of_rows(block.data<T>(), rows, vocab, tg + t0, o, walk.losses + t0, walk.lse + t0);
    if (!backward) continue;
    const T* lse = walk.saved_lse ? walk.saved_lse : walk.lse;
    logit_gradients_of_rows(block.data<T>(), rows, vocab, tg + t0, o, walk.dlosses + t0, lse + t0);
    Tensor dxs = walk.dx->slice(0, t0, t0 + rows);
    amber::gemm(block, false, w, false, dxs);
    amber::gemm(block, true, xs, false, *walk.dw, 1.0, walk.accumulate_dw || t0 > 0 ? 1.0 : 0.0);
  }
}

// dx and dw in T: the tensors themselves when they already have that type.
template <class T>
struct Gradients {
  Tensor dx, dw;
  Gradients(Tensor& dx_out, Tensor& dw_out, bool accumulate_dw, const char* op)
      : dx(dx_out.dtype() == dtype_of<T>() ? dx_out : Tensor::empty(dx_out.shape(), dtype_of<T>())),
        dw(dw_out.dtype() == dtype_of<T>() ? dw_out
           : accumulate_dw                 ? dw_out.to(dtype_of<T>())
                                           : Tensor::empty(dw_out.shape(), dtype_of<T>())) {
    require_contiguous(dx, op);
    require_contiguous(dw, op);
  }
  void store(Tensor& dx_out, Tensor& dw_out) const {
    if (!dx.shares_storage_with(dx_out)) dx_out.copy_from(dx);
    if (!dw.shares_storage_with(dw_out)) dw_out.copy_from(dw);
  }
};

}  // namespace

void linear_cross_entropy_forward(const Tensor& x, const Tensor& w, const Tensor& targets,
                                  const CrossEntropyOptions& o, Tensor& losses, Tensor& lse) {
  check_targets(targets, w.size(0), o.ignore_index, "linear_cross_entropy_forward");
  with_compute_type(x.dtype(), [&]<class T>() {
    Output<T> lo(losses), so(lse);
    walk_logits<T>(widened<T>(x), widened<T>(w), targets.data<int32_t>(), o, {.losses = lo.data(), .lse = so.data()});
    lo.store();
    so.store();
  });
}

void linear_cross_entropy_backward(const Tensor& dlosses, const Tensor& x, const Tensor& w,
                                   const Tensor& targets, const Tensor& lse,
                                   const CrossEntropyOptions& o, Tensor& dx, Tensor& dw, bool accumulate_dw) {
  const char* op = "linear_cross_entropy_backward";
  check_targets(targets, w.size(0), o.ignore_index, op);
  with_compute_type(x.dtype(), [&]<class T>() {
    const Tensor gl = widened<T>(dlosses), sl = widened<T>(lse);
    Gradients<T> grads(dx, dw, accumulate_dw, op);
    walk_logits<T>(widened<T>(x), widened<T>(w), targets.data<int32_t>(), o,
                   {.dlosses = gl.data<T>(), .saved_lse = sl.data<T>(), .dx = &grads.dx, .dw = &grads.dw,
                    .accumulate_dw = accumulate_dw});
    grads.store(dx, dw);
  });
}

void linear_cross_entropy_forward_backward(const Tensor& dlosses, const Tensor& x, const Tensor& w,
                                           const Tensor& targets, const CrossEntropyOptions& o, Tensor& losses,
                                           Tensor& lse, Tensor& dx, Tensor& dw, bool accumulate_dw) {
  const char* op = "linear_cross_entropy_forward_backward";
  check_targets(targets, w.size(0), o.ignore_index, op);
  with_compute_type(x.dtype(), [&]<class T>() {
    const Tensor gl = widened<T>(dlosses);
    Output<T> lo(losses), so(lse);
    Gradients<T> grads(dx, dw, accumulate_dw, op);
    walk_logits<T>(widened<T>(x), widened<T>(w), targets.data<int32_t>(), o,
                   {.losses = lo.data(), .lse = so.data(), .dlosses = gl.data<T>(), .dx = &grads.dx,
                    .dw = &grads.dw, .accumulate_dw = accumulate_dw});
    lo.store();
    so.store();
    grads.store(dx, dw);
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
