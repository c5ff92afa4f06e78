// CUDA implementations behind ops/elementwise.h: contiguous f32/bf16/f16 tensors of
// one dtype, fp32 math, 16-byte accesses where alignment allows.
#pragma once

#include <span>

#include "amber/core/tensor.h"

namespace amber::cuda {

void add_scaled_into(Tensor& out, const Tensor& x, const Tensor& y, double alpha, const char* op);
void scale_into(Tensor& out, const Tensor& in, double alpha);
void fill_from_scalar(Tensor& out, const Tensor& scalar);
void zero_all(std::span<Tensor> tensors);

}  // namespace amber::cuda
