// CUDA implementations behind ops/gemm.h: cuBLASLt products (fp32 accumulation, a cached
// heuristic per shape, one workspace per thread and device) and the linear-layer bias helpers.
#pragma once

#include "amber/core/tensor.h"

namespace amber::cuda {

void gemm(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, Tensor& c,
          double alpha, double beta);
// y [N, out] += bias [out] broadcast over rows.
void add_bias(Tensor& y, const Tensor& bias);
// dbias [out] += column sums of dy [N, out], summed in a fixed order.
void bias_grad(const Tensor& dy, Tensor& dbias);

}  // namespace amber::cuda
