// A gated MLP's two products that touch its activation, each with the activation in
// the same call: the gate/up projection followed by the GLU, and the down projection's
// input gradient followed by the GLU's backward. On a Hopper GPU with bf16 tensors the
// GLU runs in the products' epilogues (ops/cuda/gemm/glu_gemm.cu), so the activation's
// inputs and dh are never read back from memory; elsewhere each call is the product
// and the activation op of ops/activation.h. The two forms agree to bf16 rounding: the
// epilogues start from the fp32 accumulator where the passes read its bf16 copy.
#pragma once

#include "amber/core/tensor.h"

namespace amber {

enum class Glu { swiglu, geglu };

// gate_up [N, 2H] = x [N, in] w^T (+ bias), w [2H, in] holding the gate's rows and
// then the value's; h [N, H] = act(gate) * value. Returns whether the GLU ran in the
// product's epilogue.
bool glu_linear_forward(Glu glu, const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& gate_up, Tensor& h);

// dgate_up [N, 2H] = the GLU's backward at gate_up of dh = dy [N, out] w_down
// ([out, H]). dh [N, H] is scratch for the product where the epilogue cannot take it.
// Returns whether the GLU's backward ran in the product's epilogue.
bool glu_linear_backward_input(Glu glu, const Tensor& dy, const Tensor& w_down, const Tensor& gate_up,
                               Tensor& dgate_up, Tensor& dh);

// The GLU alone (ops/activation.h's op for `glu`): h [N, H] = act(gate) * value of
// gate_up [N, 2H], and dgate_up from dh. For products that cannot take it in their
// epilogue.
void glu_activation_forward(Glu glu, const Tensor& gate_up, Tensor& h);
void glu_activation_backward(Glu glu, const Tensor& dh, const Tensor& gate_up, Tensor& dgate_up);

// dgate_up = the GLU's backward at gate_up of dh (as glu_activation_backward writes it,
// in dh's dtype), quantized to FP8 rows (values, scales) and columns (t_values,
// t_scales) as ops/quant.h's quantize_fp8_rows_and_columns(dgate_up, ...) writes them:
// the operands of the gate/up projection's input and weight gradients. On a GPU, for
// 16-bit tensors with H a multiple of 128, in one pass that never writes dgate_up;
// elsewhere the two ops through dgate_up [N, 2H] (scratch). Returns whether it ran in
// one pass.
bool glu_backward_fp8_rows_and_columns(Glu glu, const Tensor& dh, const Tensor& gate_up, Tensor& dgate_up,
                                       Tensor& values, Tensor& scales, Tensor& t_values, Tensor& t_scales);
// The same with rows only and dgate_up written (the compute-dtype weight gradient's
// operand, beside the input gradient's FP8 rows): on a GPU, for 16-bit tensors with H a
// multiple of 128, in one pass that writes dgate_up without reading it back.
bool glu_backward_fp8_rows(Glu glu, const Tensor& dh, const Tensor& gate_up, Tensor& dgate_up, Tensor& values,
                           Tensor& scales);

// Whether `device` runs the epilogue forms for bf16 tensors whose rows are multiples
// of 16 bytes, without bias: an sm_90 GPU, in a build with CUTLASS's headers.
bool glu_epilogues(Device device);

}  // namespace amber
