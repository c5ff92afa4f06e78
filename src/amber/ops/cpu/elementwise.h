// CPU implementations behind ops/elementwise.h (inputs validated by the entry points).
#pragma once

#include <span>

#include "amber/core/tensor.h"

namespace amber::cpu {

void add_scaled_into(Tensor& out, const Tensor& x, const Tensor& y, double alpha);
void scale_into(Tensor& out, const Tensor& in, double alpha);
void fill_from_scalar(Tensor& out, const Tensor& scalar);
void zero_all(std::span<Tensor> tensors);

}  // namespace amber::cpu
