// CUDA implementations behind ops/rope.h: one block per token, its cos/sin row formed
// in double from the RopeTable (as on the CPU), f32/bf16/f16 tensors of one dtype.
#pragma once

#include "amber/core/tensor.h"
#include "amber/ops/rope.h"

namespace amber::cuda {

void rope_forward(const Tensor& x, const Tensor& positions, const RopeTable& table, Tensor& y);
void rope_backward(const Tensor& dy, const Tensor& positions, const RopeTable& table, Tensor& dx);
void qk_norm_rope_forward(const QkNormRopeForward& q, const QkNormRopeForward& k, const Tensor& positions,
                          const RopeTable& table);
void qk_norm_rope_backward(const QkNormRopeBackward& q, const QkNormRopeBackward& k, const Tensor& positions,
                           const RopeTable& table);

}  // namespace amber::cuda
