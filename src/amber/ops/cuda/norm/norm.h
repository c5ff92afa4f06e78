// CUDA implementations behind ops/norm.h: f32/bf16/f16 rows (the input and its gradient
// contiguous or token-strided), fp32 statistics, weight gradients reduced
// deterministically through per-block partial sums.
#pragma once

#include "amber/core/tensor.h"
#include "amber/ops/norm.h"

namespace amber::cuda {

void rmsnorm_forward(const Tensor& x, const Tensor& weight, double eps, Tensor& y, Tensor& rstd,
                     const ResidualAdd& add);
void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                      Tensor& dx, Tensor& dweight, bool accumulate);
void layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                       Tensor& y, Tensor& mean, Tensor& rstd, const ResidualAdd& add);
void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias, bool accumulate);

}  // namespace amber::cuda
