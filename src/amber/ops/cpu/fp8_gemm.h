// The CPU oracle of ops/fp8_gemm.h (operands validated by the entry point).
#pragma once

#include "amber/core/tensor.h"
#include "amber/ops/fp8_gemm.h"

namespace amber::cpu {

void gemm_fp8(const Tensor& a, const Tensor& a_scales, const Tensor& b, const Tensor& b_scales, Fp8Scaling b_scaling,
              Tensor& c, double alpha, double beta);

}  // namespace amber::cpu
