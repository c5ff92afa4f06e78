// Feed-forward activations. The gated forms read one fused projection
// gate_up [N, 2H] whose first half is the gate and second half the value, and
// write h [N, H]; internal math is fp32 (fp64 for f64 inputs).
#pragma once

#include "amber/core/tensor.h"

namespace amber {

// h = silu(gate) * value
void swiglu_forward(const Tensor& gate_up, Tensor& h);
void swiglu_backward(const Tensor& dh, const Tensor& gate_up, Tensor& dgate_up);

// h = gelu_tanh(gate) * value (the tanh approximation, as in GeGLU models)
void geglu_forward(const Tensor& gate_up, Tensor& h);
void geglu_backward(const Tensor& dh, const Tensor& gate_up, Tensor& dgate_up);

// y = gelu(x) with the exact erf form (plain two-layer MLP)
void gelu_forward(const Tensor& x, Tensor& y);
void gelu_backward(const Tensor& dy, const Tensor& x, Tensor& dx);

}  // namespace amber
