#include "amber/ops/cpu/blas.h"

#include <cblas.h>

#include <cstring>

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

std::string wider_blas_core(bool avx512, const char* openblas_config, const char* openblas_core) {
  // Only a build with every kernel family (DYNAMIC_ARCH) can switch.
  const bool switchable = std::strstr(openblas_config, "DYNAMIC_ARCH") != nullptr;
  if (avx512 && switchable && std::strcmp(openblas_core, "Haswell") == 0) return "SkylakeX";
  return {};
}

std::string wider_blas_core() {
#if defined(__x86_64__)
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  return wider_blas_core(avx512, openblas_get_config(), openblas_get_corename());
#else
  return {};
#endif
}

}  // namespace amber::cpu
