// The block-scaled FP8 product through cuBLASLt (sm_90 and later). Row-major
// c [M, N] = a [M, K] b [N, K]^T is the column-major c^T = b a^T: cuBLASLt's A is our b
// (transposed), its B our a, both K-major as its FP8 products require; its A scales are
// b's (1x128 blocks: VEC128_32F, 128x128 tiles: BLK128x128_32F), its B scales a's.
#include "amber/ops/cuda/gemm/fp8_gemm.h"

#include <cublasLt.h>

#include <map>
#include <tuple>

#include "amber/core/error.h"
#include "amber/core/stream.h"
#include "amber/ops/cuda/gemm/lt_handle.h"
#include "amber/ops/fp8_gemm.h"
#include "amber/ops/quant.h"

namespace amber::cuda {
namespace {

// Everything a heuristic answer depends on: sizes, b's scaling, c's dtype, whether c is
// read (beta != 0).
using Fp8Key = std::tuple<int64_t, int64_t, int64_t, int, int, bool>;

// The scale layouts cuBLASLt reads (ops/fp8_gemm.h's fp8_gemm_scales).
void check_layout(const Tensor& scales, Fp8Scaling scaling, int64_t rows, int64_t cols, const char* name) {
  const Shape storage = fp8_gemm_scales_storage(scaling, rows, cols);
  const bool by_rows = scaling == Fp8Scaling::rows;
  const bool ok = by_rows ? (scales.size(0) < 2 || scales.stride(0) == 1) &&
                                (scales.size(1) < 2 || scales.stride(1) == rows)
                          : scales.stride(1) == 1 && (scales.size(0) < 2 || scales.stride(0) == storage[1]);
  AMBER_CHECK(ok, "gemm_fp8: ", name, "'s scales ", scales.shape(), " lie with strides (", scales.stride(0), ", ",
              scales.stride(1), "); on the GPU give them fp8_gemm_scales's layout (",
              by_rows ? "column-major" : "row-major, rows padded to 4 scales", ")");
}

}  // namespace

void gemm_fp8(const Tensor& a, const Tensor& a_scales, const Tensor& b, const Tensor& b_scales, Fp8Scaling b_scaling,
              Tensor& c, double alpha, double beta) {
  const int64_t m = a.size(0), n = b.size(0), k = a.size(1);
  // cuBLASLt (CUDA 13.0, sm_90) has no block-scaled algorithm otherwise: status 15 for
  // a [130, 256] by b [200, 256]; K tails within a 128-wide block are fine.
  AMBER_CHECK(k % 16 == 0 && m % 16 == 0 && n % 16 == 0, "gemm_fp8: M = ", m, " and N = ", n,
              " must be multiples of 16, and K = ", k, ", on the GPU (cuBLASLt's block-scaled FP8 products)");
  check_layout(a_scales, Fp8Scaling::rows, m, k, "a");
  check_layout(b_scales, b_scaling, n, k, "b");
  const LtHandle& lt = lt_handle();
  const cudaDataType_t c_type = c.dtype() == DType::f32 ? CUDA_R_32F : CUDA_R_16BF;
  LtDescriptors d;
  const auto check = [&](cublasStatus_t status, const char* what) {
    AMBER_CHECK(status == CUBLAS_STATUS_SUCCESS, "gemm_fp8: cuBLASLt ", what, " failed (status ",
                static_cast<int>(status), ") for a [", m, ", ", k, "], b [", n, ", ", k, "] scaled by ",
                b_scaling == Fp8Scaling::rows ? "rows" : "tiles", " -> ", dtype_name(c.dtype()));
  };
  check(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul descriptor");
  const cublasOperation_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)), "TRANSA");
  check(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof(keep)), "TRANSB");
  const cublasLtMatmulMatrixScale_t b_mode = b_scaling == Fp8Scaling::rows
                                                 ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                                                 : CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
  const cublasLtMatmulMatrixScale_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  check(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &b_mode, sizeof(b_mode)),
        "A scale mode");
  check(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &a_mode, sizeof(a_mode)),
        "B scale mode");
  const void* b_scale_ptr = b_scales.raw();
  const void* a_scale_ptr = a_scales.raw();
  check(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &b_scale_ptr,
                                       sizeof(b_scale_ptr)), "A scale pointer");
  check(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a_scale_ptr,
                                       sizeof(a_scale_ptr)), "B scale pointer");
  check(cublasLtMatrixLayoutCreate(&d.a, CUDA_R_8F_E4M3, k, n, k), "layout of b");
  check(cublasLtMatrixLayoutCreate(&d.b, CUDA_R_8F_E4M3, k, m, k), "layout of a");
  check(cublasLtMatrixLayoutCreate(&d.c, c_type, n, m, n), "layout of c");

  thread_local std::map<std::pair<int, Fp8Key>, cublasLtMatmulAlgo_t> algos;
  int device = 0;
  cudaGetDevice(&device);
  const Fp8Key key{m, n, k, static_cast<int>(b_scaling), static_cast<int>(c.dtype()), beta != 0.0};
  auto found = algos.find({device, key});
  if (found == algos.end()) {
    check(cublasLtMatmulPreferenceCreate(&d.pref), "preference");
    const uint64_t workspace = kLtWorkspaceBytes;
    check(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                               sizeof(workspace)), "workspace preference");
    cublasLtMatmulHeuristicResult_t result{};
    int count = 0;
    check(cublasLtMatmulAlgoGetHeuristic(lt.handle, d.op, d.a, d.b, d.c, d.c, d.pref, 1, &result, &count),
          "heuristic");
    AMBER_CHECK(count > 0, "gemm_fp8: cuBLASLt has no block-scaled FP8 algorithm for a [", m, ", ", k, "], b [", n,
                ", ", k, "] on this card (sm_90 or later with CUDA 12.9 or later is needed)");
    found = algos.emplace(std::make_pair(device, key), result.algo).first;
  }
  const float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
  check(cublasLtMatmul(lt.handle, d.op, &alpha_f, b.raw(), d.a, a.raw(), d.b, &beta_f, c.raw(), d.c, c.raw(), d.c,
                       &found->second, lt.workspace, kLtWorkspaceBytes, current_stream()),
        "matmul");
}

}  // namespace amber::cuda
