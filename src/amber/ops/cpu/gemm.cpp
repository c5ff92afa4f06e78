// CPU GEMM and linear layers on OpenBLAS (sgemm/dgemm: fp32 or fp64 accumulate).
#include "amber/ops/cpu/gemm.h"

#include <algorithm>

#include "amber/ops/cpu/blas.h"
#include "amber/ops/cpu/dispatch.h"

namespace amber::cpu {
namespace {

// Rows (or columns) per BLAS call: the split side in four parts, rounded up to a
// multiple of 64 and at most 1024. A function of the product's shape alone, never of
// the thread count: OpenBLAS's sum for an element can depend on the rows of the call
// (a 128 x 32 x 458 product as two 64-row calls differs from one call), so a split by
// threads changed bits with the thread count (Gemm.ThreadCountDoesNotChangeBits). Each call packs the whole other operand again,
// so fewer, larger calls pack less: on two cores a 25M model's step took 2089 ms with
// 64-row calls cut into eighths, 2001 ms in quarters and 1957 ms in halves
// (docs/perf/cpu.md); quarters still keep four threads busy.
constexpr int64_t kTileQuantum = 64, kMaxTile = 1024, kParts = 4;
int64_t tile_of(int64_t extent) {
  const int64_t part = (extent + kParts - 1) / kParts;
  return std::clamp((part + kTileQuantum - 1) / kTileQuantum * kTileQuantum, kTileQuantum, kMaxTile);
}

// The product in fixed tiles over amber's OpenMP pool, one single-threaded BLAS call each.
template <class T>
void tiled_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const T* a, int64_t lda,
                const T* b, int64_t ldb, double beta, T* c) {
  const bool parallel = m * n * k >= (int64_t{1} << 20);
  if (m >= n) {
    const int64_t tile = tile_of(m), tiles = (m + tile - 1) / tile;
#pragma omp parallel for schedule(dynamic) if (parallel)
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t r0 = t * tile, rows = std::min(tile, m - r0);
      // Rows r0.. of op(A): rows of A, or columns of A when transposed.
      const T* a_tile = ta ? a + r0 : a + r0 * lda;
      blas_gemm(ta, tb, rows, n, k, alpha, a_tile, lda, b, ldb, beta, c + r0 * n, n);
    }
  } else {
    const int64_t tile = tile_of(n), tiles = (n + tile - 1) / tile;
#pragma omp parallel for schedule(dynamic) if (parallel)
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t c0 = t * tile, cols = std::min(tile, n - c0);
      const T* b_tile = tb ? b + c0 * ldb : b + c0;
      blas_gemm(ta, tb, m, cols, k, alpha, a, lda, b_tile, ldb, beta, c + c0, n);
    }
  }
}

}  // namespace

void gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, double alpha, double beta,
          const Tensor& addend) {
  if (addend.defined() && beta != 0.0) c.copy_from(addend);
  const int64_t m = ta ? a.size(1) : a.size(0), k = ta ? a.size(0) : a.size(1);
  const int64_t n = tb ? b.size(0) : b.size(1);
  with_compute_type(c.dtype(), [&]<class T>() {
    const Tensor aw = widened<T>(a), bw = widened<T>(b);
    Output<T> out(c, beta != 0.0);
    if (m > 0 && n > 0)
      tiled_gemm<T>(ta, tb, m, n, k, alpha, aw.data<T>(), a.size(1), bw.data<T>(), b.size(1), beta, out.data());
    out.store();
  });
}

void add_bias(Tensor& y, const Tensor& bias) {
  with_compute_type(y.dtype(), [&]<class T>() {
    const Tensor bw = widened<T>(bias);
    Output<T> out(y, true);
    const T* b = bw.data<T>();
    T* p = out.data();
    const int64_t rows = y.size(0), cols = y.size(1);
#pragma omp parallel for if (rows * cols > 65536)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) p[r * cols + c] += b[c];
    out.store();
  });
}

void bias_grad(const Tensor& dy, Tensor& dbias) {
  with_compute_type(dbias.dtype(), [&]<class T>() {
    const Tensor g = widened<T>(dy);
    Output<T> out(dbias, true);
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

}  // namespace amber::cpu
