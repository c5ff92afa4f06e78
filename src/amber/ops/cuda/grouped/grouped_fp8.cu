// The FP8 m-grouped forward products (e4m3 operands with 1x128 activation and 128x128
// weight block scales) on the Hopper kernel of grouped_m.cuh, writing bf16; the plain
// products take 256-wide tiles where the 16-bit ones would.
#include "amber/ops/cuda/grouped/grouped_m.cuh"

namespace amber::cuda {
namespace {

using grouped::Args;
using grouped::Epilogue;
using grouped::Fp8;

// The operands' shared checks, and the arguments both products start from.
Args<__nv_bfloat16> fp8_args(const Tensor& x, const Tensor& x_scales, const Tensor& w, const Tensor& w_scales,
                             const Tensor& offsets, const char* op) {
  grouped::check_supported(x, static_cast<int>(w.size(0)), op);
  AMBER_CHECK(x.dtype() == DType::f8e4m3 && w.dtype() == DType::f8e4m3, op, ": FP8 operands must be f8e4m3, got ",
              dtype_name(x.dtype()), " and ", dtype_name(w.dtype()));
  Args<__nv_bfloat16> a{};
  a.offsets = static_cast<const int*>(offsets.raw());
  a.experts = static_cast<int>(w.size(0));
  a.rows = static_cast<int>(x.size(0));
  a.n_out = a.w_rows_per_expert = static_cast<int>(w.size(1));
  a.k = static_cast<int>(x.size(1));
  a.x_scales = static_cast<const float*>(x_scales.raw());
  a.w_scales = static_cast<const float*>(w_scales.raw());
  a.k_blocks = static_cast<int>(x_scales.size(1));
  a.n_blocks = static_cast<int>(w_scales.size(1));
  a.w_scale_expert = w_scales.stride(0);
  a.w_scale_row = w_scales.stride(1);
  a.w_scale_col = w_scales.stride(2);
  return a;
}

// The products at the width wide_tiles chooses.
template <Epilogue kE>
void launch(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor* gate_up, const Args<__nv_bfloat16>& a,
            const char* op) {
  if (grouped::wide_tiles<Fp8, kE>(a))
    grouped::launch_tiles<Fp8, kE, 256, false>(x, w, y, gate_up, a, op);
  else
    grouped::launch_tiles<Fp8, kE, 128, false>(x, w, y, gate_up, a, op);
}

}  // namespace

void grouped_gemm_forward_fp8(const Tensor& x, const Tensor& x_scales, const Tensor& w, const Tensor& w_scales,
                              const Tensor& offsets, Tensor& y, const Tensor& row_scale) {
  const char* op = "grouped_gemm_forward_fp8";
  Args<__nv_bfloat16> a = fp8_args(x, x_scales, w, w_scales, offsets, op);
  AMBER_CHECK(y.dtype() == DType::bf16, op, ": the GPU writes bf16, got ", dtype_name(y.dtype()));
  a.y = static_cast<__nv_bfloat16*>(y.raw());
  a.y_cols = a.n_out;
  if (row_scale.defined()) {
    a.row_scale = static_cast<const float*>(row_scale.raw());
    launch<Epilogue::row_scale>(x, w, y, nullptr, a, op);
  } else {
    launch<Epilogue::plain>(x, w, y, nullptr, a, op);
  }
}

void grouped_gemm_swiglu_forward_fp8(const Tensor& x, const Tensor& x_scales, const Tensor& w,
                                     const Tensor& w_scales, const Tensor& offsets, Tensor& gate_up, Tensor& h) {
  const char* op = "grouped_gemm_swiglu_forward_fp8";
  Args<__nv_bfloat16> a = fp8_args(x, x_scales, w, w_scales, offsets, op);
  AMBER_CHECK(h.dtype() == DType::bf16 && (!gate_up.defined() || gate_up.dtype() == DType::bf16), op,
              ": the GPU writes bf16, got ", dtype_name(h.dtype()));
  AMBER_CHECK(a.n_out % 128 == 0, op, ": ", a.n_out / 2,
              " columns per half; the GPU's SwiGLU tiles need each half a multiple of 64");
  a.y = static_cast<__nv_bfloat16*>(h.raw());
  a.y_cols = a.n_out / 2;
  a.gate_up = gate_up.defined() ? static_cast<__nv_bfloat16*>(gate_up.raw()) : nullptr;
  launch<Epilogue::swiglu>(x, w, h, gate_up.defined() ? &gate_up : nullptr, a, op);
}

}  // namespace amber::cuda
