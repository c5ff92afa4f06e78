// CPU implementations behind ops/grouped_gemm.h (shapes validated by the entry points;
// the offsets are read here and checked against the rows the buffers hold).
#pragma once

#include "amber/core/tensor.h"

namespace amber::cpu {

void grouped_gemm_forward(const Tensor& x, const Tensor& w, const Tensor& offsets, Tensor& y, const Tensor& row_scale);
void grouped_gemm_swiglu_forward(const Tensor& x, const Tensor& w, const Tensor& offsets, Tensor& gate_up, Tensor& h);
void grouped_gemm_backward_input(const Tensor& dy, const Tensor& w, const Tensor& offsets, Tensor& dx);
void grouped_gemm_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& offsets, Tensor& dw,
                                  bool accumulate);
// squares [E, 8 ceil(N / 128), ceil(K / 128)] = the sums of the squares of dw [E, N, K]
// in blocks of 16 rows and 128 columns (ops/grouped_gemm.h), in double.
void block_squares(const Tensor& dw, Tensor& squares);

}  // namespace amber::cpu
