// CUDA implementations behind ops/activation.h: contiguous f32/bf16/f16 tensors of one
// dtype, fp32 math, 16-byte accesses where the row width and alignment allow.
#pragma once

#include "amber/core/tensor.h"

namespace amber::cuda {

void swiglu_forward(const Tensor& gate_up, Tensor& h);
void swiglu_backward(const Tensor& dh, const Tensor& gate_up, Tensor& dgate_up);
void geglu_forward(const Tensor& gate_up, Tensor& h);
void geglu_backward(const Tensor& dh, const Tensor& gate_up, Tensor& dgate_up);
void gelu_forward(const Tensor& x, Tensor& y);
void gelu_backward(const Tensor& dy, const Tensor& x, Tensor& dx);

}  // namespace amber::cuda
