// Quantizers of the low-precision products and their dequantizers: FP8 e4m3 with one
// fp32 scale per 1x128 row block (activations, DeepSeek-V3) or per 128x128 tile
// (weights), OCP MXFP4 (e2m1 pairs in bytes, one e8m0 scale per 32 elements) and OCP
// MXFP8 (e4m3, one e8m0 scale per 32 elements: Blackwell's block-scaled format).
// docs/numerics.md gives each format's layout, scale rule, rounding and special values.
#pragma once

#include "amber/core/tensor.h"

namespace amber {

constexpr int64_t kFp8Block = 128;   // edge of an FP8 scale block, rows and tiles
constexpr int64_t kMxBlock = 32;  // elements per MX (MXFP4, MXFP8) scale

// Shapes of the outputs, for callers allocating them.
Shape fp8_rows_scales_shape(const Shape& x);      // [M, K] -> [M, ceil(K/128)]
Shape fp8_blocks_scales_shape(const Shape& w);    // [..., N, K] -> [..., ceil(N/128), ceil(K/128)]
Shape mxfp4_values_shape(const Shape& w);         // [..., K] -> [..., K/2]
Shape mx_scales_shape(const Shape& w);            // [..., K] -> [..., K/32], MXFP4 and MXFP8

// The FP8 scales of a 2-D source may be any 2-D view (a column-major one, as the dense
// FP8 product of ops/fp8_gemm.h reads them), those of a stack [E, N, K] any 3-D view
// (the transposed one, whose scales land as each matrix's transpose's); deeper stacks'
// are contiguous. Scale (b, i, j) (matrix b, row block i, column block j) lies at
// b * matrix + i * row + j * col.
struct Fp8ScaleStrides {
  int64_t matrix, row, col;
};
Fp8ScaleStrides fp8_scale_strides(const Tensor& scales);

// x [M, K] (f32, bf16, f16) -> values [M, K] f8e4m3, scales [M, ceil(K/128)] f32.
// Per block: scale = amax / 448, values = e4m3(x / scale), both correctly rounded
// fp32 operations, so the GPU writes the CPU's bits.
void quantize_fp8_rows(const Tensor& x, Tensor& values, Tensor& scales);
// The same of x's transpose, in one pass over x: x [M, K] -> values [K, M] f8e4m3 and
// scales [K, ceil(M/128)], one per 128 consecutive rows of a column of x (the blocks a
// weight gradient dy^T x contracts over); the bits of quantize_fp8_rows(x^T).
void quantize_fp8_columns(const Tensor& x, Tensor& values, Tensor& scales);
// Both of the above from one read of x (a gradient that feeds an input gradient and a
// weight gradient): the bits of quantize_fp8_rows into values / scales and of
// quantize_fp8_columns into t_values / t_scales.
void quantize_fp8_rows_and_columns(const Tensor& x, Tensor& values, Tensor& scales, Tensor& t_values,
                                   Tensor& t_scales);
// The checks quantize_fp8_rows and quantize_fp8_rows_and_columns make of x and their
// outputs, for ops that write those outputs from what x would hold (ops/glu_linear.h).
void check_fp8_rows(const Tensor& x, const Tensor& values, const Tensor& scales, const char* op);
void check_fp8_rows_and_columns(const Tensor& x, const Tensor& values, const Tensor& scales, const Tensor& t_values,
                                const Tensor& t_scales, const char* op);
// x [M, K] (f32, bf16; f64 on the CPU) = values * scales, rounded once from fp32.
void dequantize_fp8_rows(const Tensor& values, const Tensor& scales, Tensor& x);

// w [..., N, K] (f32, bf16, f16; leading dims stack experts) -> values f8e4m3 of w's
// shape, scales [..., ceil(N/128), ceil(K/128)] f32, one per 128x128 tile.
// `transposed` (when given) gets each matrix's values^T [..., K, N] in the same pass: a
// tile's codes do not depend on its orientation, so with scales^T they are w^T's
// quantization.
void quantize_fp8_blocks(const Tensor& w, Tensor& values, Tensor& scales, Tensor* transposed = nullptr);
void dequantize_fp8_blocks(const Tensor& values, const Tensor& scales, Tensor& w);

// w [..., K] (f32, bf16, f16) with K % 32 == 0 -> values u8 [..., K/2] (element 2i in
// the low nibble of byte i, 2i+1 in the high nibble), scales e8m0 [..., K/32].
void quantize_mxfp4(const Tensor& w, Tensor& values, Tensor& scales);
void dequantize_mxfp4(const Tensor& values, const Tensor& scales, Tensor& w);

// w [..., K] (f32, bf16, f16) with K % 32 == 0 -> values f8e4m3 of w's shape, scales
// e8m0 [..., K/32].
void quantize_mxfp8(const Tensor& w, Tensor& values, Tensor& scales);
void dequantize_mxfp8(const Tensor& values, const Tensor& scales, Tensor& w);

}  // namespace amber
