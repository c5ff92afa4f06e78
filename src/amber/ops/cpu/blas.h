// One BLAS product on row-major matrices, C = alpha op(A) op(B) + beta C, run on the
// calling thread. amber splits its work over its own OpenMP pool and calls BLAS from
// inside it, so BLAS's own thread pool is kept at one thread: two pools spinning
// against each other on few cores cost 1.6-1.8x on the demo model (docs/perf/cpu.md).
// A product's bits depend on its shape alone, so callers fix the shapes of their calls
// by the problem, never by the thread count.
#pragma once

#include <cstdint>

namespace amber::cpu {

void blas_gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, double alpha,
               const float* a, int64_t lda, const float* b, int64_t ldb, double beta, float* c, int64_t ldc);
void blas_gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, double alpha,
               const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

}  // namespace amber::cpu
