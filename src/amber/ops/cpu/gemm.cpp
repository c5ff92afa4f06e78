// CPU GEMM and linear layers on OpenBLAS (sgemm/dgemm: fp32 or fp64 accumulate).
#include "amber/ops/gemm.h"

#include <cblas.h>

#include "amber/ops/cpu/dispatch.h"

namespace amber {
namespace {

void blas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const float* a,
               int64_t lda, const float* b, int64_t ldb, double beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k,
              static_cast<float>(alpha), a, lda, b, ldb, static_cast<float>(beta), c, ldc);
}
void blas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
               int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k,
              alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace

void gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, double alpha, double beta) {
  cpu::require_cpu(a, "gemm");
  AMBER_CHECK(a.ndim() == 2 && b.ndim() == 2 && c.ndim() == 2, "gemm takes 2-D tensors, got ",
              a.shape(), " ", b.shape(), " ", c.shape());
  const int64_t m = ta ? a.size(1) : a.size(0), k = ta ? a.size(0) : a.size(1);
  const int64_t kb = tb ? b.size(1) : b.size(0), n = tb ? b.size(0) : b.size(1);
  AMBER_CHECK(k == kb && c.size(0) == m && c.size(1) == n, "gemm shapes do not agree: op(a) ", m,
              "x", k, ", op(b) ", kb, "x", n, ", c ", c.shape());
  cpu::with_compute_type(c.dtype(), [&]<class T>() {
    const Tensor aw = cpu::widened<T>(a), bw = cpu::widened<T>(b);
    cpu::Output<T> out(c, beta != 0.0);
    if (m > 0 && n > 0)
      blas_gemm(ta, tb, m, n, k, alpha, aw.data<T>(), a.size(1), bw.data<T>(), b.size(1), beta,
                out.data(), n);
    out.store();
  });
}

void linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y) {
  AMBER_CHECK(x.ndim() == 2 && w.ndim() == 2 && x.size(1) == w.size(1), "linear: input ",
              x.shape(), " does not match weight ", w.shape(), " ([out, in])");
  gemm(x, false, w, true, y);
  if (!bias.defined()) return;
  AMBER_CHECK(bias.ndim() == 1 && bias.size(0) == w.size(0), "linear: bias ", bias.shape(),
              " does not match weight ", w.shape());
  cpu::with_compute_type(y.dtype(), [&]<class T>() {
    const Tensor bw = cpu::widened<T>(bias);
    cpu::Output<T> out(y, true);
    const T* b = bw.data<T>();
    T* p = out.data();
    const int64_t rows = y.size(0), cols = y.size(1);
#pragma omp parallel for if (rows * cols > 65536)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) p[r * cols + c] += b[c];
    out.store();
  });
}

void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw,
                     Tensor& dbias) {
  AMBER_CHECK(dy.ndim() == 2 && dy.size(0) == x.size(0) && dy.size(1) == w.size(0),
              "linear backward: grad ", dy.shape(), " does not match input ", x.shape(),
              " and weight ", w.shape());
  if (dx.defined()) gemm(dy, false, w, false, dx);
  gemm(dy, true, x, false, dw, 1.0, 1.0);
  if (!dbias.defined()) return;
  cpu::with_compute_type(dbias.dtype(), [&]<class T>() {
    const Tensor g = cpu::widened<T>(dy);
    cpu::Output<T> out(dbias, true);
    const T* p = g.data<T>();
    T* db = out.data();
    const int64_t rows = dy.size(0), cols = dy.size(1);
    // Column sums in row order: deterministic for any thread count.
#pragma omp parallel for if (rows * cols > 65536)
    for (int64_t c = 0; c < cols; ++c) {
      T s = 0;
      for (int64_t r = 0; r < rows; ++r) s += p[r * cols + c];
      db[c] += s;
    }
    out.store();
  });
}

}  // namespace amber
