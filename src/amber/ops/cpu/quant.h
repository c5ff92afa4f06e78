// CPU quantizers and dequantizers behind ops/quant.h (inputs validated by the entry
// points): the oracle of the CUDA kernels, built on the core's scalar conversions.
#pragma once

#include "amber/core/tensor.h"

namespace amber::cpu {

void quantize_fp8_rows(const Tensor& x, Tensor& values, Tensor& scales);
void quantize_fp8_columns(const Tensor& x, Tensor& values, Tensor& scales);
void quantize_fp8_rows_and_columns(const Tensor& x, Tensor& values, Tensor& scales, Tensor& t_values,
                                   Tensor& t_scales);
void dequantize_fp8_rows(const Tensor& values, const Tensor& scales, Tensor& x);
void quantize_fp8_blocks(const Tensor& w, Tensor& values, Tensor& scales, Tensor* transposed);
void dequantize_fp8_blocks(const Tensor& values, const Tensor& scales, Tensor& w);
void quantize_mxfp4(const Tensor& w, Tensor& values, Tensor& scales);
void dequantize_mxfp4(const Tensor& values, const Tensor& scales, Tensor& w);
void quantize_mxfp8(const Tensor& w, Tensor& values, Tensor& scales);
void dequantize_mxfp8(const Tensor& values, const Tensor& scales, Tensor& w);

}  // namespace amber::cpu
