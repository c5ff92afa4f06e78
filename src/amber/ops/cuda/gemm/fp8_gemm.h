// CUDA implementation behind ops/fp8_gemm.h: cuBLASLt's block-scaled FP8 product.
#pragma once

#include "amber/core/tensor.h"
#include "amber/ops/fp8_gemm.h"

namespace amber::cuda {

void gemm_fp8(const Tensor& a, const Tensor& a_scales, const Tensor& b, const Tensor& b_scales, Fp8Scaling b_scaling,
              Tensor& c, double alpha, double beta);

}  // namespace amber::cuda
