// CPU implementations behind ops/rope.h (shapes validated by the entry points).
#pragma once

#include "amber/core/tensor.h"
#include "amber/ops/rope.h"

namespace amber::cpu {

void rope_forward(const Tensor& x, const Tensor& positions, const RopeTable& table, Tensor& y);
void rope_backward(const Tensor& dy, const Tensor& positions, const RopeTable& table, Tensor& dx);
// One pass per head row: the norm, then the rotation (the transpose rotation, then the
// norm's gradient, backward). q and k share a dtype.
void qk_norm_rope_forward(const QkNormRopeForward& q, const QkNormRopeForward& k, const Tensor& positions,
                          const RopeTable& table);
void qk_norm_rope_backward(const QkNormRopeBackward& q, const QkNormRopeBackward& k, const Tensor& positions,
                           const RopeTable& table);

}  // namespace amber::cpu
