// Element-wise helpers of the residual stream.
#pragma once

#include <span>

#include "amber/core/tensor.h"

namespace amber {

// x += alpha * y (same shape, contiguous).
void add_scaled(Tensor& x, const Tensor& y, double alpha = 1.0);
// out = x + alpha * y in one pass (out may be x); `op` names the call in errors and
// profiles.
void add_scaled_into(Tensor& out, const Tensor& x, const Tensor& y, double alpha,
                     const char* op = "add_scaled_into");
// out = alpha * in.
void scale_into(Tensor& out, const Tensor& in, double alpha);
// Every element of out = scalar (one f64 element on out's device), read where it
// lives: a value the host changes between replays of a captured step.
void fill_from_scalar(Tensor& out, const Tensor& scalar);
// Every tensor (contiguous, any dtype, one device) set to zero. On a GPU a launch zeroes
// up to 64 tensors, where a memset each would cost a step's graph one node per tensor
// (a training step zeroes every norm's weight gradient).
void zero_all(std::span<Tensor> tensors);

}  // namespace amber
