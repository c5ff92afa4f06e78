// Entry point of ops/fp8_gemm.h: operands checked against each other (errors name
// them), then the device switch; and the GPU's scale layouts.
#include "amber/ops/fp8_gemm.h"

#include "amber/ops/cpu/fp8_gemm.h"
#include "amber/ops/cuda/gemm/fp8_gemm.h"
#include "amber/ops/device_switch.h"
#include "amber/ops/quant.h"

namespace amber {
namespace {

constexpr int64_t kTileScalesRowMultiple = 4;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

Shape scales_shape(Fp8Scaling scaling, const Shape& operand) {
  return scaling == Fp8Scaling::rows ? fp8_rows_scales_shape(operand) : fp8_blocks_scales_shape(operand);
}

void check_operand(const char* op, const char* name, const Tensor& t, const Tensor& scales, Fp8Scaling scaling,
                   int64_t k) {
  AMBER_CHECK(t.ndim() == 2 && t.size(1) == k, op, ": ", name, " ", t.shape(), " must be [rows, ", k, "]");
  AMBER_CHECK(t.dtype() == DType::f8e4m3, op, ": ", name, " is ", dtype_name(t.dtype()),
              "; quantize it to f8e4m3 with ops/quant.h");
  require_contiguous(t, op);
  const Shape want = scales_shape(scaling, t.shape());
  AMBER_CHECK(scales.dtype() == DType::f32 && scales.shape() == want, op, ": ", name, "'s scales ", scales.shape(),
              " ", dtype_name(scales.dtype()), " must be f32 ", want, " (one per ",
              scaling == Fp8Scaling::rows ? "1x128 block of a row" : "128x128 tile", ")");
}

}  // namespace

Shape fp8_gemm_scales_storage(Fp8Scaling scaling, int64_t rows, int64_t cols) {
  const int64_t blocks = ceil_div(cols, kFp8Block);
  if (scaling == Fp8Scaling::rows) return {blocks, rows};
  return {ceil_div(rows, kFp8Block), ceil_div(blocks, kTileScalesRowMultiple) * kTileScalesRowMultiple};
}

Tensor fp8_gemm_scales(Fp8Scaling scaling, const Tensor& storage, int64_t rows, int64_t cols) {
  const Shape want = fp8_gemm_scales_storage(scaling, rows, cols);
  AMBER_CHECK(storage.shape() == want && storage.dtype() == DType::f32 && storage.is_contiguous(),
              "fp8_gemm_scales: storage ", storage.shape(), " ", dtype_name(storage.dtype()),
              " must be contiguous f32 ", want, " for an operand [", rows, ", ", cols, "]");
  if (scaling == Fp8Scaling::rows) return storage.transpose(0, 1);
  return storage.slice(1, 0, ceil_div(cols, kFp8Block));
}

void gemm_fp8(const Tensor& a, const Tensor& a_scales, const Tensor& b, const Tensor& b_scales, Fp8Scaling b_scaling,
              Tensor& c, double alpha, double beta) {
  const char* op = "gemm_fp8";
  AMBER_CHECK(a.ndim() == 2, op, ": a ", a.shape(), " must be [M, K]");
  const int64_t k = a.size(1);
  check_operand(op, "a", a, a_scales, Fp8Scaling::rows, k);
  check_operand(op, "b", b, b_scales, b_scaling, k);
  AMBER_CHECK(c.ndim() == 2 && c.size(0) == a.size(0) && c.size(1) == b.size(0), op, ": c ", c.shape(),
              " must be [", a.size(0), ", ", b.size(0), "] for a ", a.shape(), " and b ", b.shape());
  AMBER_CHECK(c.dtype() == DType::f32 || c.dtype() == DType::bf16 || (c.dtype() == DType::f64 && c.device().is_cpu()),
              op, ": c is ", dtype_name(c.dtype()), "; FP8 products write f32 or bf16 (or f64 on the CPU)");
  require_contiguous(c, op);
  if (c.numel() == 0) return;
  AMBER_ON_DEVICE(ops::common_device(op, {&a, &a_scales, &b, &b_scales, &c}), op,
                  cuda::gemm_fp8(a, a_scales, b, b_scales, b_scaling, c, alpha, beta),
                  cpu::gemm_fp8(a, a_scales, b, b_scales, b_scaling, c, alpha, beta));
}

}  // namespace amber
