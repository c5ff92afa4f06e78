// CPU implementations behind ops/rope.h (shapes validated by the entry points).
#pragma once

#include "amber/core/tensor.h"
#include "amber/ops/rope.h"

namespace amber::cpu {

void rope_forward(const Tensor& x, const Tensor& positions, const RopeTable& table, Tensor& y);
void rope_backward(const Tensor& dy, const Tensor& positions, const RopeTable& table, Tensor& dx);

}  // namespace amber::cpu
