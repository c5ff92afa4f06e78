// Element-wise helpers of the residual stream.
#pragma once

#include "amber/core/tensor.h"

namespace amber {

// x += alpha * y (same shape, contiguous).
void add_scaled(Tensor& x, const Tensor& y, double alpha = 1.0);
// out = alpha * in.
void scale_into(Tensor& out, const Tensor& in, double alpha);

}  // namespace amber
