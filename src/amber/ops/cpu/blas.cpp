#include "amber/ops/cpu/blas.h"

#include <cblas.h>

namespace amber::cpu {
namespace {

CBLAS_TRANSPOSE op(bool transpose) { return transpose ? CblasTrans : CblasNoTrans; }

void single_threaded_blas() {
  static const bool once = (openblas_set_num_threads(1), true);
  (void)once;
}

}  // namespace

void blas_gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, double alpha,
               const float* a, int64_t lda, const float* b, int64_t ldb, double beta, float* c, int64_t ldc) {
  single_threaded_blas();
  cblas_sgemm(CblasRowMajor, op(transpose_a), op(transpose_b), m, n, k, static_cast<float>(alpha), a, lda, b,
              ldb, static_cast<float>(beta), c, ldc);
}

void blas_gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, double alpha,
               const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  single_threaded_blas();
  cblas_dgemm(CblasRowMajor, op(transpose_a), op(transpose_b), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace amber::cpu
