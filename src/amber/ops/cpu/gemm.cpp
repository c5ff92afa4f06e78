// CPU GEMM and linear layers on OpenBLAS (sgemm/dgemm: fp32 or fp64 accumulate).
#include "amber/ops/cpu/gemm.h"

#include <algorithm>

#include "amber/ops/cpu/blas.h"
#include "amber/ops/cpu/dispatch.h"

namespace amber::cpu {
namespace {

// The tiles of a product: the larger side in four parts and the smaller in two, each
// rounded up to a multiple of 64 and at most 1024. A function of the product's shape
// alone, never of the thread count: OpenBLAS's sum for an element can depend on the
// rows of the call (a 128 x 32 x 458 product as two 64-row calls differs from one
// call), so a split by threads changed bits with the thread count
// (Gemm.ThreadCountDoesNotChangeBits). Each call packs its operands again, so fewer,
// larger calls pack less, and more calls keep more threads busy: a 25M model's step
// (docs/perf/cpu.md) took 1812-1864 ms on two cores with the larger side in quarters
// and 1905-1960 ms in eight tiles, while at 8 threads of a 16-core Xeon its products
// took 1650 ms a step in quarters and 695 ms in eight tiles.
constexpr int64_t kTileQuantum = 64, kMaxTile = 1024, kLargerParts = 4, kSmallerParts = 2;
int64_t tile_of(int64_t extent, int64_t parts) {
  const int64_t part = (extent + parts - 1) / parts;
  return std::clamp((part + kTileQuantum - 1) / kTileQuantum * kTileQuantum, kTileQuantum, kMaxTile);
}

// The product in fixed tiles over amber's OpenMP pool, one single-threaded BLAS call each.
template <class T>
void tiled_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const T* a, int64_t lda,
                const T* b, int64_t ldb, double beta, T* c) {
  const bool parallel = m * n * k >= (int64_t{1} << 20);
  const int64_t rows = tile_of(m, m >= n ? kLargerParts : kSmallerParts);
  const int64_t cols = tile_of(n, m >= n ? kSmallerParts : kLargerParts);
  const int64_t row_tiles = (m + rows - 1) / rows, col_tiles = (n + cols - 1) / cols;
#pragma omp parallel for schedule(dynamic) if (parallel)
  for (int64_t t = 0; t < row_tiles * col_tiles; ++t) {
    const int64_t r0 = t / col_tiles * rows, c0 = t % col_tiles * cols;
    // Rows r0.. of op(A): rows of A, or columns of A when transposed; likewise columns c0.. of op(B).
    const T* a_tile = ta ? a + r0 : a + r0 * lda;
    const T* b_tile = tb ? b + c0 * ldb : b + c0;
    blas_gemm(ta, tb, std::min(rows, m - r0), std::min(cols, n - c0), k, alpha, a_tile, lda, b_tile, ldb, beta,
              c + r0 * n + c0, n);
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
