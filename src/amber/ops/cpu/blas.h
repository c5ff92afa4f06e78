// One BLAS product on row-major matrices, C = alpha op(A) op(B) + beta C, run on the
// calling thread. amber splits its work over its own OpenMP pool and calls BLAS from
// inside it, so BLAS's own thread pool is kept at one thread: two pools spinning
// against each other on few cores cost 1.6-1.8x on the demo model (docs/perf/cpu.md).
// A product's bits depend on its shape alone, so callers fix the shapes of their calls
// by the problem, never by the thread count.
#pragma once

#include <cstdint>
#include <string>

namespace amber::cpu {

void blas_gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, double alpha,
               const float* a, int64_t lda, const float* b, int64_t ldb, double beta, float* c, int64_t ldc);
void blas_gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, double alpha,
               const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

// The OPENBLAS_CORETYPE to set when OpenBLAS chose kernels narrower than the CPU's
// vector units, else empty. Ubuntu 24.04's OpenBLAS 0.3.26 runs its AVX2 ("Haswell")
// kernels on AVX-512 Xeons whose model it does not know, at half the speed of its
// SkylakeX kernels (70 against 141 GFLOP/s a core for a 512 x 1024 x 512 sgemm).
// OpenBLAS reads the variable once, when it loads, so a caller must start a new process.
std::string wider_blas_core();

// The rule behind wider_blas_core, given what it probes: whether the CPU has AVX-512
// (F, BW, DQ, VL), OpenBLAS's build configuration and the kernels it chose.
std::string wider_blas_core(bool avx512, const char* openblas_config, const char* openblas_core);

}  // namespace amber::cpu
