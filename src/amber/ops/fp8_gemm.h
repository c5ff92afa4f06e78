// Block-scaled FP8 products (DeepSeek-V3's recipe, issue 44): e4m3 operands, each with
// fp32 scales per 1x128 block of a row or per 128x128 tile (ops/quant.h's quantizers),
// fp32 accumulation. On the GPU they run cuBLASLt's block-scaled modes, which read the
// scales in the layouts fp8_gemm_scales gives; the CPU oracle reads any layout.
#pragma once

#include "amber/core/tensor.h"

namespace amber {

// How an operand [R, K] is scaled: one scale per 1x128 block of a row (scales
// [R, ceil(K/128)], quantize_fp8_rows or quantize_fp8_columns) or per 128x128 tile
// (scales [ceil(R/128), ceil(K/128)], quantize_fp8_blocks).
enum class Fp8Scaling { rows, tiles };

// c [M, N] = alpha (a * a_scales) (b * b_scales)^T + beta c: a e4m3 [M, K] scaled by rows,
// b e4m3 [N, K] by rows or tiles (b_scaling); c f32 or bf16. The CPU dequantizes both
// operands exactly into float64 and rounds the float64 product once; the GPU accumulates
// in fp32 (scales applied per 128-wide k block), within about 1e-4 of the oracle
// (docs/numerics.md). GPU: M, N and K multiples of 16, a and b contiguous, scales as
// fp8_gemm_scales lays them out.
void gemm_fp8(const Tensor& a, const Tensor& a_scales, const Tensor& b, const Tensor& b_scales,
              Fp8Scaling b_scaling, Tensor& c, double alpha = 1.0, double beta = 0.0);

// Scales for an operand [rows, cols] laid out as the GPU product reads them, views into
// `storage` (allocated with fp8_gemm_scales_storage's shape, f32): by rows, [rows,
// ceil(cols/128)] column-major (the rows of a column block adjacent); by tiles,
// [ceil(rows/128), ceil(cols/128)] row-major with rows padded to a multiple of 4 scales.
Shape fp8_gemm_scales_storage(Fp8Scaling scaling, int64_t rows, int64_t cols);
Tensor fp8_gemm_scales(Fp8Scaling scaling, const Tensor& storage, int64_t rows, int64_t cols);

}  // namespace amber
