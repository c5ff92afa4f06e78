// CUDA grouped products behind ops/grouped_gemm.h: persistent Hopper (sm_90a) kernels
// that walk (expert, tile) work from the offsets on the device (grouped_m.cu,
// grouped_k.cu). Other cards and dtypes are refused with the reason.
#pragma once

#include "amber/core/tensor.h"

namespace amber::cuda {

void grouped_gemm_forward(const Tensor& x, const Tensor& w, const Tensor& offsets, Tensor& y, const Tensor& row_scale);
void grouped_gemm_swiglu_forward(const Tensor& x, const Tensor& w, const Tensor& offsets, Tensor& gate_up, Tensor& h);
void grouped_gemm_backward_input(const Tensor& dy, const Tensor& w, const Tensor& offsets, Tensor& dx);
void grouped_gemm_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& offsets, Tensor& dw,
                                  bool accumulate);

// A Hopper card (sm_90) in a build with sm_90a code.
bool grouped_gemm_available(int device);

// The m-grouped kernels' store partition (on unless switched off for its A/B in
// `amber bench kernel grouped`; docs/perf/grouped_gemm.md).
void set_grouped_store_partition(bool on);
bool grouped_store_partition();

}  // namespace amber::cuda
