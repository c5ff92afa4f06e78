// Grouped matrix products of Mixture-of-Experts layers. Rows (token copies) are sorted
// by expert: expert e owns rows offsets[e] .. offsets[e + 1] - 1, with offsets an i32
// tensor [E + 1] on the operands' device (offsets[0] = 0, non-decreasing, offsets[E] at
// most the rows the buffers hold). The GPU never reads the offsets back to the host: a
// launch is sized by the buffers' shapes and tiles past an expert's rows exit at once,
// so a CUDA graph captured once replays with any routing. Rows past offsets[E] are
// neither read into a result nor written.
//
// m-grouped products (forward and input gradient) split the rows; the k-grouped one
// (weight gradient) reduces over them. Operands are 16-bit (bf16/f16) or, on the CPU,
// f32/f64 too; products accumulate in fp32 (f64 for f64), outputs round once.
#pragma once

#include "amber/core/tensor.h"

namespace amber {

// y [M, N] = x_e [rows of e, K] w_e^T for each expert, w [E, N, K]. With row_scale
// [M] (f32; f64 beside f64 operands) each row is scaled as it is written: y[r] = row_scale[r] * (x w_e^T)[r]
// (the gate weights of a MoE layer's second product).
void grouped_gemm_forward(const Tensor& x, const Tensor& w, const Tensor& offsets, Tensor& y,
                          const Tensor& row_scale = Tensor());

// The first product of a SwiGLU expert: w [E, 2H, K] holds each expert's gate rows and
// then its up rows; h [M, H] = silu(gate) * up from the fp32 products. gate_up [M, 2H]
// receives the products themselves when defined (what the backward reads).
void grouped_gemm_swiglu_forward(const Tensor& x, const Tensor& w, const Tensor& offsets, Tensor& gate_up,
                                 Tensor& h);

// dx [M, K] = dy_e [rows of e, N] w_e for each expert, w [E, N, K].
void grouped_gemm_backward_input(const Tensor& dy, const Tensor& w, const Tensor& offsets, Tensor& dx);

// dw [E, N, K] (f32, or x's dtype on the CPU) += dy_e^T x_e over each expert's rows;
// with accumulate false dw = (its old values never read). An expert without rows gets
// zeros (or keeps its values). Given `squares` (f64, grouped_weight_squares_shape(dw)),
// the product also leaves the sums of the squares of dw's new values in blocks of 16
// rows and 128 columns: squares[e, i, j] covers dw[e, 16i .. 16i + 15, 128j .. 128j +
// 127] (zero where that is past dw's end), so a gradient norm needs no pass over dw.
// Blocks the call leaves unchanged (an expert without rows, accumulating) keep theirs.
void grouped_gemm_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& offsets, Tensor& dw,
                                  bool accumulate, Tensor* squares = nullptr);
// [E, 8 ceil(N / 128), ceil(K / 128)] for dw [E, N, K].
Shape grouped_weight_squares_shape(const Shape& dw);

// FP8 forms of the forward products (the DeepSeek-V3 recipe; ops/quant.h makes the
// operands): x e4m3 [M, K] with f32 scales [M, ceil(K/128)] (quantize_fp8_rows), w e4m3
// [E, N, K] with f32 scales [E, ceil(N/128), ceil(K/128)] (quantize_fp8_blocks; the
// scales at any strides, so the transposed view of w's serves the w^T that
// quantize_fp8_blocks writes beside w); the
// outputs are the products of the dequantized operands, fp32-accumulated, in bf16 (on the
// CPU also f32/f64: the float64 oracle). The GPU needs K a multiple of 16 and, for
// SwiGLU, H a multiple of 64 (a tile's gate and up rows each in one weight block).
void grouped_gemm_forward_fp8(const Tensor& x, const Tensor& x_scales, const Tensor& w, const Tensor& w_scales,
                              const Tensor& offsets, Tensor& y, const Tensor& row_scale = Tensor());
void grouped_gemm_swiglu_forward_fp8(const Tensor& x, const Tensor& x_scales, const Tensor& w,
                                     const Tensor& w_scales, const Tensor& offsets, Tensor& gate_up, Tensor& h);

// MXFP4 weights (the gpt-oss storage; ops/quant.h's quantize_mxfp4: codes u8 [E, N,
// K/2], scales e8m0 [E, N, K/32]) beside activations x [M, K]: the products of x and
// the dequantized weights, fp32-accumulated, in y's dtype (bf16 x and y on the GPU; on
// the CPU any float, f64 the float64 oracle). The GPU dequantizes in registers, for the
// small expert batches where the weights' bytes set the time (an expert's rows past 64
// read its weights again), and needs K a multiple of 32 and N of 64.
void grouped_gemm_forward_mxfp4(const Tensor& x, const Tensor& codes, const Tensor& scales, const Tensor& offsets,
                                Tensor& y, const Tensor& row_scale = Tensor());
void grouped_gemm_swiglu_forward_mxfp4(const Tensor& x, const Tensor& codes, const Tensor& scales,
                                       const Tensor& offsets, Tensor& gate_up, Tensor& h);

// Whether `device` runs these products: the CPU always, a GPU when it is a Hopper card
// (sm_90) and this build has sm_90a code.
bool grouped_gemm_available(Device device);

// For the A/B of `amber bench kernel grouped`: the Hopper kernels drain results through
// a store partition (the default) or store them from the math warps, load FP8 scales
// with a loader of their own (the default) or with the tiles' loader, and take tiles
// 128 or 256 columns wide, or as the shape suggests (tile_n 0). Every variant gives the
// same bits; CPU-only builds ignore it.
struct GroupedGemmVariant {
  bool store_partition = true;
  bool split_scales = true;  // FP8 scales by a loader of their own, or by the tiles' loader
  int tile_n = 0;
};
void set_grouped_gemm_variant(const GroupedGemmVariant& variant);

}  // namespace amber
