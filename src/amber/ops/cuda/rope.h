// CUDA implementations behind ops/rope.h: one block per token, its cos/sin row formed
// in double from the RopeTable (as on the CPU), f32/bf16/f16 tensors of one dtype.
#pragma once

#include "amber/core/tensor.h"
#include "amber/ops/rope.h"

namespace amber::cuda {

void rope_forward(const Tensor& x, const Tensor& positions, const RopeTable& table, Tensor& y);
void rope_backward(const Tensor& dy, const Tensor& positions, const RopeTable& table, Tensor& dx);

}  // namespace amber::cuda
