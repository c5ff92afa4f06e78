// The GLU's backward with its output quantized to FP8 (ops/glu_linear.h's
// glu_backward_fp8_rows_and_columns and glu_backward_fp8_rows) in one pass on a GPU.
#pragma once

#include "amber/core/tensor.h"
#include "amber/ops/glu_linear.h"

namespace amber::cuda {

// The one pass, where it takes these tensors: 16-bit dh [N, H] and gate_up [N, 2H] of
// one dtype, H a multiple of 128, both aligned to 16 bytes, values to 8. Returns
// whether it ran (nothing is written when it did not).
bool glu_backward_fp8_rows_and_columns(Glu glu, const Tensor& dh, const Tensor& gate_up, Tensor& values,
                                       Tensor& scales, Tensor& t_values, Tensor& t_scales);
// The rows-only pass, which writes dgate_up too, where it takes these tensors: as above,
// dgate_up of dh's dtype and aligned to 16 bytes.
bool glu_backward_fp8_rows(Glu glu, const Tensor& dh, const Tensor& gate_up, Tensor& dgate_up, Tensor& values,
                           Tensor& scales);

}  // namespace amber::cuda
