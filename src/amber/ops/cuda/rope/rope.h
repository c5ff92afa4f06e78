// CUDA implementations behind ops/rope.h: one block per token, its cos/sin row formed
// in double from the RopeTable (as on the CPU), f32/bf16/f16 tensors of one dtype.
#pragma once

#include "amber/core/tensor.h"
#include "amber/ops/rope.h"

namespace amber::cuda {

struct OrderedSum;

void rope_forward(const Tensor& x, const Tensor& positions, const RopeTable& table, Tensor& y);
void rope_backward(const Tensor& dy, const Tensor& positions, const RopeTable& table, Tensor& dx);
void qk_norm_rope_forward(const QkNormRopeForward& q, const QkNormRopeForward& k, const Tensor& positions,
                          const RopeTable& table);
// Whether these shapes run as one fused kernel (else as the two ops per side).
bool qk_norm_rope_backward_fuses(const QkNormRopeBackward& q, const QkNormRopeBackward& k, const RopeTable& table);
// q_dy_sum, when given, is q's dy instead of q.dy (which may then be undefined): an
// attention's ordered f32 sum (ordered_sum.cuh). It needs the fused kernel and bf16 or
// f16 tensors.
void qk_norm_rope_backward(const QkNormRopeBackward& q, const QkNormRopeBackward& k, const Tensor& positions,
                           const RopeTable& table, const OrderedSum* q_dy_sum = nullptr);

}  // namespace amber::cuda
