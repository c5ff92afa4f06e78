// CPU implementations behind ops/activation.h (inputs validated by the entry points).
#pragma once

#include "amber/core/tensor.h"

namespace amber::cpu {

void swiglu_forward(const Tensor& gate_up, Tensor& h);
void swiglu_backward(const Tensor& dh, const Tensor& gate_up, Tensor& dgate_up);
void geglu_forward(const Tensor& gate_up, Tensor& h);
void geglu_backward(const Tensor& dh, const Tensor& gate_up, Tensor& dgate_up);
void gelu_forward(const Tensor& x, Tensor& y);
void gelu_backward(const Tensor& dy, const Tensor& x, Tensor& dx);

}  // namespace amber::cpu
