// CPU implementations behind ops/gemm.h (shapes validated by the entry points): the
// BLAS product and the two bias helpers of the linear layer.
#pragma once

#include "amber/core/tensor.h"

namespace amber::cpu {

void gemm(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, Tensor& c,
          double alpha, double beta, const Tensor& addend = Tensor());
// y [N, out] += bias [out] broadcast over rows.
void add_bias(Tensor& y, const Tensor& bias);
// dbias [out] += column sums of dy [N, out], summed in a fixed order.
void bias_grad(const Tensor& dy, Tensor& dbias);

}  // namespace amber::cpu
