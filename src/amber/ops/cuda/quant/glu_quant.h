// The GLU's backward with its output quantized to FP8 (ops/glu_linear.h's
// glu_backward_fp8_rows_and_columns) in one pass on a GPU.
#pragma once

#include "amber/core/tensor.h"
#include "amber/ops/glu_linear.h"

namespace amber::cuda {

// The one pass, where it takes these tensors: 16-bit dh [N, H] and gate_up [N, 2H] of
// one dtype, H a multiple of 128, both aligned to 16 bytes, values to 8. Returns
// whether it ran (nothing is written when it did not).
bool glu_backward_fp8_rows_and_columns(Glu glu, const Tensor& dh, const Tensor& gate_up, Tensor& values,
                                       Tensor& scales, Tensor& t_values, Tensor& t_scales);

}  // namespace amber::cuda
