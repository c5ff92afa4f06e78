// The down projection's input gradient of a MoE layer with the SwiGLU's backward in its
// epilogue (grouped_m.cuh, Epilogue::swiglu_backward): da = douts w_down stays in the
// accumulators, and the epilogue reads gate and up from shared memory and writes what
// moe_swiglu_backward would (act_w, dgate_up), so da's round trip through memory and the
// separate pass are gone. A row's gate weight gradient da . act spans its 128-wide tiles,
// so each tile writes its partial dot and a second, small pass sums them in tile order
// (the same bits whichever block ran which tile).
#include "amber/ops/cuda/grouped/grouped_m.cuh"

namespace amber::cuda {
namespace {

using grouped::Args;
using grouped::Epilogue;
using grouped::Plain;

constexpr int kTileCols = 128;

// dweights[i] = the sum of row slot_rows[i]'s partial dots, in tile order.
__global__ void sum_row_dots_kernel(const float* row_dots, const int* slot_rows, int64_t copies, int n_tiles,
                                    float* dweights) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= copies) return;
  const float* dots = row_dots + static_cast<int64_t>(slot_rows[i]) * n_tiles;
  float sum = 0.0f;
  for (int j = 0; j < n_tiles; ++j) sum += dots[j];
  dweights[i] = sum;
}

}  // namespace

bool grouped_gemm_backward_input_swiglu(const Tensor& douts, const Tensor& w_down, const Tensor& offsets,
                                        const Tensor& gate_up, const Tensor& row_weights, const Tensor& slot_rows,
                                        Tensor& scratch, Tensor& dgate_up, Tensor& act_w, Tensor& dweights) {
  const char* op = "grouped_gemm_backward_input_swiglu";
  const int64_t hidden = w_down.size(2), rows = douts.size(0);
  const bool is16 = douts.dtype() == DType::bf16 || douts.dtype() == DType::f16;
  if (!grouped_gemm_available(douts.device().index) || !is16 || hidden % kTileCols != 0 ||
      row_weights.dtype() != DType::f32 || dweights.dtype() != DType::f32)
    return false;
  grouped::check_supported(douts, static_cast<int>(w_down.size(0)), op);
  const int n_tiles = static_cast<int>(hidden / kTileCols);
  const auto run = [&](auto tag) {
    using T = decltype(tag);
    Args<T> a{};
    a.offsets = static_cast<const int*>(offsets.raw());
    a.experts = static_cast<int>(w_down.size(0));
    a.rows = static_cast<int>(rows);
    a.n_out = a.y_cols = static_cast<int>(hidden);
    a.k = a.w_rows_per_expert = static_cast<int>(w_down.size(1));
    a.y = static_cast<T*>(act_w.raw());
    a.dgate_up = static_cast<T*>(dgate_up.raw());
    a.row_scale = static_cast<const float*>(row_weights.raw());
    // The partial dots take the first rows x n_tiles f32 of da's room (a 16-bit [R, H]
    // with H a multiple of 128 holds 64 times as many bytes).
    a.row_dots = static_cast<float*>(scratch.raw());
    grouped::launch_tiles<Plain<T>, Epilogue::swiglu_backward, kTileCols, true>(douts, w_down, act_w, &gate_up, a,
                                                                                  op);
  };
  if (douts.dtype() == DType::bf16)
    run(__nv_bfloat16{});
  else
    run(__half{});
  const int64_t copies = slot_rows.numel();
  if (copies > 0) {
    sum_row_dots_kernel<<<static_cast<unsigned>((copies + 255) / 256), 256, 0, current_stream()>>>(
        static_cast<const float*>(scratch.raw()), static_cast<const int*>(slot_rows.raw()), copies, n_tiles,
        static_cast<float*>(dweights.raw()));
    check_launch(op, slot_rows.shape());
  }
  return true;
}

}  // namespace amber::cuda
