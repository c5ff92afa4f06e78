// CUDA side of ops/glu_linear.h: the gated MLP's products with the GLU in their
// epilogues (CUTLASS on Hopper). Each returns false, having done nothing, where the
// fused kernels do not apply (not bf16, not sm_90, rows not 16-byte multiples, or a
// build without CUTLASS's headers); the caller then runs the product and the pass.
#pragma once

#include "amber/core/tensor.h"
#include "amber/ops/glu_linear.h"

namespace amber::cuda {

// The gate half by cuBLASLt into gate_up's first columns, then the value half by a
// product whose epilogue reads the gate and writes the value and h.
bool glu_linear_forward(Glu glu, const Tensor& x, const Tensor& w, Tensor& gate_up, Tensor& h);
// dy w_down in a product whose epilogue reads gate_up and writes dgate_up.
bool glu_linear_backward_input(Glu glu, const Tensor& dy, const Tensor& w_down, const Tensor& gate_up,
                               Tensor& dgate_up);
// Whether GPU `device` runs them: sm_90, and this build has CUTLASS's headers.
bool glu_epilogues(int device);

}  // namespace amber::cuda
