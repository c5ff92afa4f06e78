// Entry points of ops/quant.h: every tensor's shape and dtype checked against the
// source's (errors name both), then the device switch.
#include "amber/ops/quant.h"

#include "amber/ops/cpu/quant.h"
#include "amber/ops/cuda/quant/quant.h"
#include "amber/ops/device_switch.h"

namespace amber {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

void check_source(const Tensor& t, const char* op, const char* name) {
  AMBER_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::bf16 || t.dtype() == DType::f16, op, ": ",
              name, " ", t.shape(), " is ", dtype_name(t.dtype()), "; the quantizers read f32, bf16 or f16");
  require_contiguous(t, op);
}

// An output or an input derived from `source`: it must have `shape` and `dtype`.
void check_companion(const Tensor& t, const char* op, const char* name, const Shape& shape, DType dtype,
                     const char* source_name, const Shape& source_shape) {
  AMBER_CHECK(t.defined() && t.shape() == shape && t.dtype() == dtype, op, ": ", name, " ",
              t.defined() ? t.shape() : Shape{}, " ", t.defined() ? dtype_name(t.dtype()) : "undefined",
              " must be ", shape, " ", dtype_name(dtype), " for ", source_name, " ", source_shape);
  require_contiguous(t, op);
}

void check_dequantized(const Tensor& t, const char* op, const char* name) {
  const bool cpu_f64 = t.dtype() == DType::f64 && t.device().is_cpu();
  AMBER_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::bf16 || cpu_f64, op, ": ", name, " ", t.shape(),
              " is ", dtype_name(t.dtype()), "; dequantizers write f32 or bf16 (or f64 on the CPU)");
  require_contiguous(t, op);
}

// FP8 scales: a 2-D view of any strides (ops/quant.h), a stack's contiguous.
void check_fp8_scales(const Tensor& t, const char* op, const Shape& shape, const char* source_name,
                      const Shape& source_shape) {
  AMBER_CHECK(t.defined() && t.shape() == shape && t.dtype() == DType::f32, op, ": scales ",
              t.defined() ? t.shape() : Shape{}, " ", t.defined() ? dtype_name(t.dtype()) : "undefined", " must be ",
              shape, " f32 for ", source_name, " ", source_shape);
  if (t.ndim() > 3) require_contiguous(t, op);
}

// x^T's rows: values [K, M] and their scales.
void check_fp8_columns(const Tensor& x, const Tensor& values, const Tensor& scales, const char* op) {
  AMBER_CHECK(x.ndim() == 2, op, ": x ", x.shape(), " must be [M, K]");
  const Shape transposed{x.size(1), x.size(0)};
  check_companion(values, op, "transposed values", transposed, DType::f8e4m3, "x", x.shape());
  check_fp8_scales(scales, op, fp8_rows_scales_shape(transposed), "x", x.shape());
}

void check_fp8_blocks(const Tensor& w, const Tensor& values, const Tensor& scales, const char* op) {
  AMBER_CHECK(w.ndim() >= 2, op, ": w ", w.shape(), " must be [..., N, K]");
  check_companion(values, op, "values", w.shape(), DType::f8e4m3, "w", w.shape());
  check_fp8_scales(scales, op, fp8_blocks_scales_shape(w.shape()), "w", w.shape());
}

void check_mxfp4(const Tensor& w, const Tensor& values, const Tensor& scales, const char* op) {
  AMBER_CHECK(w.ndim() >= 1 && w.size(-1) % kMxBlock == 0, op, ": w ", w.shape(),
              " must be [..., K] with K a multiple of 32 (one MXFP4 scale per 32 elements of the last dim)");
  check_companion(values, op, "values", mxfp4_values_shape(w.shape()), DType::u8, "w", w.shape());
  check_companion(scales, op, "scales", mx_scales_shape(w.shape()), DType::e8m0, "w", w.shape());
}

void check_mxfp8(const Tensor& w, const Tensor& values, const Tensor& scales, const char* op) {
  AMBER_CHECK(w.ndim() >= 1 && w.size(-1) % kMxBlock == 0, op, ": w ", w.shape(),
              " must be [..., K] with K a multiple of 32 (one MXFP8 scale per 32 elements of the last dim)");
  check_companion(values, op, "values", w.shape(), DType::f8e4m3, "w", w.shape());
  check_companion(scales, op, "scales", mx_scales_shape(w.shape()), DType::e8m0, "w", w.shape());
}

}  // namespace

void check_fp8_rows(const Tensor& x, const Tensor& values, const Tensor& scales, const char* op) {
  AMBER_CHECK(x.ndim() == 2, op, ": x ", x.shape(), " must be [M, K]");
  check_companion(values, op, "values", x.shape(), DType::f8e4m3, "x", x.shape());
  check_fp8_scales(scales, op, fp8_rows_scales_shape(x.shape()), "x", x.shape());
}

Fp8ScaleStrides fp8_scale_strides(const Tensor& scales) {
  if (scales.ndim() == 2) return {0, scales.stride(0), scales.stride(1)};
  if (scales.ndim() == 3) return {scales.stride(0), scales.stride(1), scales.stride(2)};
  return {scales.size(-2) * scales.size(-1), scales.size(-1), 1};
}

Shape fp8_rows_scales_shape(const Shape& x) {
  AMBER_CHECK(x.ndim() == 2, "fp8_rows_scales_shape: x ", x, " must be [M, K]");
  return {x[0], ceil_div(x[1], kFp8Block)};
}

Shape fp8_blocks_scales_shape(const Shape& w) {
  AMBER_CHECK(w.ndim() >= 2, "fp8_blocks_scales_shape: w ", w, " must be [..., N, K]");
  Shape s = w;
  s[w.ndim() - 2] = ceil_div(w[w.ndim() - 2], kFp8Block);
  s[w.ndim() - 1] = ceil_div(w[w.ndim() - 1], kFp8Block);
  return s;
}

Shape mxfp4_values_shape(const Shape& w) {
  AMBER_CHECK(w.ndim() >= 1 && w[w.ndim() - 1] % 2 == 0, "mxfp4_values_shape: w ", w,
              " must be [..., K] with K even");
  Shape s = w;
  s[w.ndim() - 1] = w[w.ndim() - 1] / 2;
  return s;
}

Shape mx_scales_shape(const Shape& w) {
  AMBER_CHECK(w.ndim() >= 1 && w[w.ndim() - 1] % kMxBlock == 0, "mx_scales_shape: w ", w,
              " must be [..., K] with K a multiple of 32");
  Shape s = w;
  s[w.ndim() - 1] = w[w.ndim() - 1] / kMxBlock;
  return s;
}

void quantize_fp8_rows(const Tensor& x, Tensor& values, Tensor& scales) {
  const char* op = "quantize_fp8_rows";
  check_source(x, op, "x");
  check_fp8_rows(x, values, scales, op);
  if (x.numel() == 0) return;
  AMBER_ON_DEVICE(ops::common_device(op, {&x, &values, &scales}), op, cuda::quantize_fp8_rows(x, values, scales),
                  cpu::quantize_fp8_rows(x, values, scales));
}

void quantize_fp8_columns(const Tensor& x, Tensor& values, Tensor& scales) {
  const char* op = "quantize_fp8_columns";
  check_source(x, op, "x");
  check_fp8_columns(x, values, scales, op);
  if (x.numel() == 0) return;
  AMBER_ON_DEVICE(ops::common_device(op, {&x, &values, &scales}), op, cuda::quantize_fp8_columns(x, values, scales),
                  cpu::quantize_fp8_columns(x, values, scales));
}

void check_fp8_rows_and_columns(const Tensor& x, const Tensor& values, const Tensor& scales, const Tensor& t_values,
                                const Tensor& t_scales, const char* op) {
  check_source(x, op, "x");
  check_fp8_rows(x, values, scales, op);
  check_fp8_columns(x, t_values, t_scales, op);
}

void quantize_fp8_rows_and_columns(const Tensor& x, Tensor& values, Tensor& scales, Tensor& t_values,
                                   Tensor& t_scales) {
  const char* op = "quantize_fp8_rows_and_columns";
  check_fp8_rows_and_columns(x, values, scales, t_values, t_scales, op);
  if (x.numel() == 0) return;
  AMBER_ON_DEVICE(ops::common_device(op, {&x, &values, &scales, &t_values, &t_scales}), op,
                  cuda::quantize_fp8_rows_and_columns(x, values, scales, t_values, t_scales),
                  cpu::quantize_fp8_rows_and_columns(x, values, scales, t_values, t_scales));
}

void dequantize_fp8_rows(const Tensor& values, const Tensor& scales, Tensor& x) {
  const char* op = "dequantize_fp8_rows";
  check_dequantized(x, op, "x");
  check_fp8_rows(x, values, scales, op);
  if (x.numel() == 0) return;
  AMBER_ON_DEVICE(ops::common_device(op, {&values, &scales, &x}), op, cuda::dequantize_fp8_rows(values, scales, x),
                  cpu::dequantize_fp8_rows(values, scales, x));
}

void quantize_fp8_blocks(const Tensor& w, Tensor& values, Tensor& scales, Tensor* transposed) {
  const char* op = "quantize_fp8_blocks";
  check_source(w, op, "w");
  check_fp8_blocks(w, values, scales, op);
  if (transposed) {
    Shape transposed_shape = w.shape();
    std::swap(transposed_shape[w.ndim() - 2], transposed_shape[w.ndim() - 1]);
    check_companion(*transposed, op, "transposed", transposed_shape, DType::f8e4m3, "w", w.shape());
    AMBER_CHECK(transposed->device() == w.device(), op, ": transposed is on ", transposed->device(), ", w on ",
                w.device());
  }
  if (w.numel() == 0) return;
  AMBER_ON_DEVICE(ops::common_device(op, {&w, &values, &scales}), op,
                  cuda::quantize_fp8_blocks(w, values, scales, transposed),
                  cpu::quantize_fp8_blocks(w, values, scales, transposed));
}

void dequantize_fp8_blocks(const Tensor& values, const Tensor& scales, Tensor& w) {
  const char* op = "dequantize_fp8_blocks";
  check_dequantized(w, op, "w");
  check_fp8_blocks(w, values, scales, op);
  if (w.numel() == 0) return;
  AMBER_ON_DEVICE(ops::common_device(op, {&values, &scales, &w}), op,
                  cuda::dequantize_fp8_blocks(values, scales, w), cpu::dequantize_fp8_blocks(values, scales, w));
}

void quantize_mxfp4(const Tensor& w, Tensor& values, Tensor& scales) {
  const char* op = "quantize_mxfp4";
  check_source(w, op, "w");
  check_mxfp4(w, values, scales, op);
  if (w.numel() == 0) return;
  AMBER_ON_DEVICE(ops::common_device(op, {&w, &values, &scales}), op, cuda::quantize_mxfp4(w, values, scales),
                  cpu::quantize_mxfp4(w, values, scales));
}

void dequantize_mxfp4(const Tensor& values, const Tensor& scales, Tensor& w) {
  const char* op = "dequantize_mxfp4";
  check_dequantized(w, op, "w");
  check_mxfp4(w, values, scales, op);
  if (w.numel() == 0) return;
  AMBER_ON_DEVICE(ops::common_device(op, {&values, &scales, &w}), op, cuda::dequantize_mxfp4(values, scales, w),
                  cpu::dequantize_mxfp4(values, scales, w));
}

void quantize_mxfp8(const Tensor& w, Tensor& values, Tensor& scales) {
  const char* op = "quantize_mxfp8";
  check_source(w, op, "w");
  check_mxfp8(w, values, scales, op);
  if (w.numel() == 0) return;
  AMBER_ON_DEVICE(ops::common_device(op, {&w, &values, &scales}), op, cuda::quantize_mxfp8(w, values, scales),
                  cpu::quantize_mxfp8(w, values, scales));
}

void dequantize_mxfp8(const Tensor& values, const Tensor& scales, Tensor& w) {
  const char* op = "dequantize_mxfp8";
  check_dequantized(w, op, "w");
  check_mxfp8(w, values, scales, op);
  if (w.numel() == 0) return;
  AMBER_ON_DEVICE(ops::common_device(op, {&values, &scales, &w}), op, cuda::dequantize_mxfp8(values, scales, w),
                  cpu::dequantize_mxfp8(values, scales, w));
}

}  // namespace amber
