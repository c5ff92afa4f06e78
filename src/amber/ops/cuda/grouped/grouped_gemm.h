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
                                  bool accumulate, Tensor* squares);
void grouped_gemm_forward_fp8(const Tensor& x, const Tensor& x_scales, const Tensor& w, const Tensor& w_scales,
                              const Tensor& offsets, Tensor& y, const Tensor& row_scale);
void grouped_gemm_swiglu_forward_fp8(const Tensor& x, const Tensor& x_scales, const Tensor& w,
                                     const Tensor& w_scales, const Tensor& offsets, Tensor& gate_up, Tensor& h);
// ops/moe.h's moe_down_backward_swiglu with the SwiGLU's backward in the product's
// epilogue (16-bit operands, H a multiple of 128; scratch holds the partial dots);
// returns whether it ran.
bool grouped_gemm_backward_input_swiglu(const Tensor& douts, const Tensor& w_down, const Tensor& offsets,
                                        const Tensor& gate_up, const Tensor& row_weights, const Tensor& slot_rows,
                                        Tensor& scratch, Tensor& dgate_up, Tensor& act_w, Tensor& dweights);

void grouped_gemm_forward_mxfp4(const Tensor& x, const Tensor& codes, const Tensor& scales, const Tensor& offsets,
                                Tensor& y, const Tensor& row_scale);
void grouped_gemm_swiglu_forward_mxfp4(const Tensor& x, const Tensor& codes, const Tensor& scales,
                                       const Tensor& offsets, Tensor& gate_up, Tensor& h);

// A Hopper card (sm_90) in a build with sm_90a code.
bool grouped_gemm_available(int device);

// How the m-grouped kernels run: with a store partition (the default) or stores from the
// math warps; FP8 scales by a loader warp of their own (the default) or by the tiles'
// loader; tiles 128 or 256 columns wide or as the shape suggests (0). Set by
// `amber bench kernel grouped` for its A/B (docs/perf/grouped_gemm.md).
struct GroupedVariant {
  bool store_partition = true;
  bool split_scales = true;
  int tile_n = 0;
};
GroupedVariant& grouped_variant();

}  // namespace amber::cuda
