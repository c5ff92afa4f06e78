// Normalisations over the last dimension. x is viewed as [N, D]; statistics are
// computed in fp32 (fp64 for f64 inputs) and saved for the backward. x and dx may also
// be token-strided views [T, H, D] (the heads of a stacked projection, rows contiguous,
// tokens apart by more than H * D); every other tensor is contiguous.
#pragma once

#include "amber/core/tensor.h"

namespace amber {

// The residual add a norm can run in the same pass over the row: sum = x + scale * r
// is written (rounded to x's dtype) and normalised in place of x, where a separate
// add would read and write the residual stream once more.
struct ResidualAdd {
  const Tensor* residual = nullptr;  // r, shaped like x; none: a plain norm of x
  double scale = 1.0;
  Tensor* sum = nullptr;  // written, shaped like x
};

// y = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps). weight [D] may be
// undefined (no affine). rstd [N] is f32 (f64 for f64 inputs).
void rmsnorm_forward(const Tensor& x, const Tensor& weight, double eps, Tensor& y, Tensor& rstd,
                     const ResidualAdd& add = {});
// dx overwritten, or with `accumulate` dx += the input gradient (the residual stream's
// gradient, in the same pass: one rounding, no separate add); dweight += (when weight
// is defined).
void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                      Tensor& dx, Tensor& dweight, bool accumulate = false);

// y = (x - mean) * rstd * weight + bias; weight and bias may be undefined.
void layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                       Tensor& y, Tensor& mean, Tensor& rstd, const ResidualAdd& add = {});
// dx as rmsnorm_backward's; dweight and dbias +=.
void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias, bool accumulate = false);

// The dtype of saved statistics for inputs of `dtype`.
DType norm_stat_dtype(DType dtype);

}  // namespace amber
