// CPU RMSNorm and LayerNorm. Weight gradients are reduced over fixed blocks of rows
// and the blocks summed in order, so results do not depend on the thread count.
#include "amber/ops/cpu/norm.h"

#include <cmath>
#include <vector>

#include "amber/ops/cpu/dispatch.h"

namespace amber::cpu {
namespace {

struct Rows {
  int64_t n, d;
};

Rows rows_of(const Tensor& x) {
  const int64_t d = x.size(-1);
  return {x.numel() / std::max<int64_t>(d, 1), d};
}

}  // namespace

void rmsnorm_forward(const Tensor& x, const Tensor& weight, double eps, Tensor& y, Tensor& rstd) {
  const Rows r = rows_of(x);
  with_compute_type(x.dtype(), [&]<class T>() {
    const Tensor xw = widened<T>(x);
    const Tensor ww = weight.defined() ? widened<T>(weight) : Tensor();
    Output<T> out(y), rs(rstd);
    const T* px = xw.data<T>();
    const T* pw = ww.defined() ? ww.data<T>() : nullptr;
    T* py = out.data();
    T* pr = rs.data();
#pragma omp parallel for if (r.n * r.d > 65536)
    for (int64_t i = 0; i < r.n; ++i) {
      const T* row = px + i * r.d;
      const T inv = rms_scale(row, r.d, eps);
      pr[i] = inv;
      for (int64_t j = 0; j < r.d; ++j) py[i * r.d + j] = row[j] * inv * (pw ? pw[j] : T(1));
    }
    out.store();
    rs.store();
  });
}

void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                      Tensor& dx, Tensor& dweight, bool accumulate) {
  const Rows r = rows_of(x);
  with_compute_type(x.dtype(), [&]<class T>() {
    const Tensor xw = widened<T>(x), gw = widened<T>(dy), rw = widened<T>(rstd);
    const Tensor ww = weight.defined() ? widened<T>(weight) : Tensor();
    Output<T> out(dx, accumulate);
    const T *px = xw.data<T>(), *pg = gw.data<T>(), *pr = rw.data<T>();
    const T* pw = ww.defined() ? ww.data<T>() : nullptr;
    T* pdx = out.data();
    const int64_t blocks = (r.n + kRowBlock - 1) / kRowBlock;
    std::vector<T> partial(pw ? static_cast<size_t>(blocks * r.d) : 0, T(0));
#pragma omp parallel for if (r.n * r.d > 65536)
    for (int64_t b = 0; b < blocks; ++b) {
      for (int64_t i = b * kRowBlock; i < std::min(r.n, (b + 1) * kRowBlock); ++i) {
        const T *row = px + i * r.d, *g = pg + i * r.d;
        const T inv = pr[i];
        rms_backward_row(g, row, pw, inv, r.d, pdx + i * r.d, accumulate);
        if (pw)
          for (int64_t j = 0; j < r.d; ++j) partial[b * r.d + j] += g[j] * row[j] * inv;
      }
    }
    out.store();
    if (pw) {
      Output<T> dwo(dweight, true);
      reduce_blocks(partial, blocks, r.d, dwo.data());
      dwo.store();
    }
  });
}

void layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                       Tensor& y, Tensor& mean, Tensor& rstd) {
  const Rows r = rows_of(x);
  with_compute_type(x.dtype(), [&]<class T>() {
    const Tensor xw = widened<T>(x);
    const Tensor ww = weight.defined() ? widened<T>(weight) : Tensor();
    const Tensor bw = bias.defined() ? widened<T>(bias) : Tensor();
    Output<T> out(y), mo(mean), ro(rstd);
    const T* px = xw.data<T>();
    const T* pw = ww.defined() ? ww.data<T>() : nullptr;
    const T* pb = bw.defined() ? bw.data<T>() : nullptr;
    T *py = out.data(), *pm = mo.data(), *pr = ro.data();
#pragma omp parallel for if (r.n * r.d > 65536)
    for (int64_t i = 0; i < r.n; ++i) {
      const T* row = px + i * r.d;
      T s = 0;
      for (int64_t j = 0; j < r.d; ++j) s += row[j];
      const T mu = s / static_cast<T>(r.d);
      T ss = 0;  // two-pass variance: no cancellation for rows with a large mean
      for (int64_t j = 0; j < r.d; ++j) ss += (row[j] - mu) * (row[j] - mu);
      const T inv = T(1) / std::sqrt(ss / static_cast<T>(r.d) + static_cast<T>(eps));
      pm[i] = mu;
      pr[i] = inv;
      for (int64_t j = 0; j < r.d; ++j)
        py[i * r.d + j] = (row[j] - mu) * inv * (pw ? pw[j] : T(1)) + (pb ? pb[j] : T(0));
    }
    out.store();
    mo.store();
    ro.store();
  });
}

void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias, bool accumulate) {
  const Rows r = rows_of(x);
  with_compute_type(x.dtype(), [&]<class T>() {
    const Tensor xw = widened<T>(x), gw = widened<T>(dy);
    const Tensor mw = widened<T>(mean), rw = widened<T>(rstd);
    const Tensor ww = weight.defined() ? widened<T>(weight) : Tensor();
    Output<T> out(dx, accumulate);
    const T *px = xw.data<T>(), *pg = gw.data<T>(), *pm = mw.data<T>(), *pr = rw.data<T>();
    const T* pw = ww.defined() ? ww.data<T>() : nullptr;
    T* pdx = out.data();
    const int64_t blocks = (r.n + kRowBlock - 1) / kRowBlock;
    const bool want_dw = pw != nullptr, want_db = dbias.defined();
    std::vector<T> pdw(want_dw ? static_cast<size_t>(blocks * r.d) : 0, T(0));
    std::vector<T> pdb(want_db ? static_cast<size_t>(blocks * r.d) : 0, T(0));
#pragma omp parallel for if (r.n * r.d > 65536)
    for (int64_t b = 0; b < blocks; ++b) {
      for (int64_t i = b * kRowBlock; i < std::min(r.n, (b + 1) * kRowBlock); ++i) {
        const T *row = px + i * r.d, *g = pg + i * r.d;
        const T mu = pm[i], inv = pr[i];
        // xhat = (x - mu) inv; dx = inv * (gw - mean(gw) - xhat * mean(gw * xhat)).
        T sum_g = 0, sum_gx = 0;
        for (int64_t j = 0; j < r.d; ++j) {
          const T gwj = g[j] * (pw ? pw[j] : T(1));
          sum_g += gwj;
          sum_gx += gwj * (row[j] - mu) * inv;
        }
        const T mg = sum_g / static_cast<T>(r.d), mgx = sum_gx / static_cast<T>(r.d);
        for (int64_t j = 0; j < r.d; ++j) {
          const T xhat = (row[j] - mu) * inv;
          pdx[i * r.d + j] = (accumulate ? pdx[i * r.d + j] : T(0)) + inv * (g[j] * (pw ? pw[j] : T(1)) - mg - xhat * mgx);
          if (want_dw) pdw[b * r.d + j] += g[j] * xhat;
          if (want_db) pdb[b * r.d + j] += g[j];
        }
      }
    }
    out.store();
    if (want_dw) {
      Output<T> o(dweight, true);
      reduce_blocks(pdw, blocks, r.d, o.data());
      o.store();
    }
    if (want_db) {
      Output<T> o(dbias, true);
      reduce_blocks(pdb, blocks, r.d, o.data());
      o.store();
    }
  });
}

}  // namespace amber::cpu
