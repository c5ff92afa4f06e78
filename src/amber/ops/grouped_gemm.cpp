// Entry points of ops/grouped_gemm.h: shapes validated with the names of the operands,
// then the device switch.
#include "amber/ops/grouped_gemm.h"

#include "amber/core/op_hook.h"
#include "amber/ops/cpu/grouped_gemm.h"
#include "amber/ops/cuda/grouped/grouped_gemm.h"
#include "amber/ops/device_switch.h"
#include "amber/ops/quant.h"

namespace amber {
namespace {

// The shared checks: contiguous operands of one floating dtype (the output of a
// weight gradient may be f32), offsets i32 [E + 1] for `experts`.
void check_operands(const char* op, std::initializer_list<const Tensor*> operands, const Tensor& offsets,
                    int64_t experts) {
  const Tensor* first = *operands.begin();
  for (const Tensor* t : operands) {
    if (!t->defined()) continue;
    require_contiguous(*t, op);
    AMBER_CHECK(t->dtype() == first->dtype(), op, ": operands of ", dtype_name(first->dtype()), " and ",
                dtype_name(t->dtype()), "; give every operand one dtype");
  }
  AMBER_CHECK(is_floating(first->dtype()), op, ": operands must be floating point, got ", dtype_name(first->dtype()));
  AMBER_CHECK(offsets.dtype() == DType::i32 && offsets.shape() == Shape({experts + 1}), op, ": offsets ",
              offsets.shape(), " ", dtype_name(offsets.dtype()), " must be i32 [", experts + 1,
              "] (experts + 1 row boundaries)");
  require_contiguous(offsets, op);
}

// The FP8 operands' checks: e4m3 values with the scales of ops/quant.h's layouts.
void check_fp8_operands(const char* op, const Tensor& x, const Tensor& x_scales, const Tensor& w,
                        const Tensor& w_scales, const Tensor& offsets) {
  AMBER_CHECK(x.ndim() == 2 && w.ndim() == 3 && x.size(1) == w.size(2), op, ": input ", x.shape(),
              " does not match weights ", w.shape(), " ([experts, N, K] against [rows, K])");
  AMBER_CHECK(x.dtype() == DType::f8e4m3 && w.dtype() == DType::f8e4m3, op, ": FP8 operands must be f8e4m3, got ",
              dtype_name(x.dtype()), " and ", dtype_name(w.dtype()), "; quantize them with ops/quant.h");
  AMBER_CHECK(x_scales.dtype() == DType::f32 && x_scales.shape() == fp8_rows_scales_shape(x.shape()), op,
              ": activation scales ", x_scales.shape(), " ", dtype_name(x_scales.dtype()), " must be f32 ",
              fp8_rows_scales_shape(x.shape()), " (quantize_fp8_rows)");
  AMBER_CHECK(w_scales.dtype() == DType::f32 && w_scales.shape() == fp8_blocks_scales_shape(w.shape()), op,
              ": weight scales ", w_scales.shape(), " ", dtype_name(w_scales.dtype()), " must be f32 ",
              fp8_blocks_scales_shape(w.shape()), " (quantize_fp8_blocks)");
  // The weight scales may be a strided view: w^T's are w's, transposed.
  for (const Tensor* t : {&x, &x_scales, &w}) require_contiguous(*t, op);
  AMBER_CHECK(offsets.dtype() == DType::i32 && offsets.shape() == Shape({w.size(0) + 1}), op, ": offsets ",
              offsets.shape(), " ", dtype_name(offsets.dtype()), " must be i32 [", w.size(0) + 1,
              "] (experts + 1 row boundaries)");
}

// The CPU oracle of the FP8 products: the dequantized operands (exact in f64) through
// the 16-bit forms' CPU path, in the output's compute type.
struct Dequantized {
  Tensor x, w;
};
Dequantized dequantized(const Tensor& x, const Tensor& x_scales, const Tensor& w, const Tensor& w_scales,
                        DType out) {
  const DType compute = out == DType::f64 ? DType::f64 : DType::f32;
  Dequantized d{Tensor::empty(x.shape(), compute), Tensor::empty(w.shape(), compute)};
  dequantize_fp8_rows(x, x_scales, d.x);
  dequantize_fp8_blocks(w, w_scales, d.w);
  return d;
}

// The MXFP4 operands' checks (ops/quant.h's layouts).
void check_mxfp4_operands(const char* op, const Tensor& x, const Tensor& codes, const Tensor& scales,
                          const Tensor& offsets) {
  AMBER_CHECK(x.ndim() == 2 && codes.ndim() == 3 && is_floating(x.dtype()) && x.size(1) % kMxBlock == 0, op,
              ": input ", x.shape(), " must be floating [rows, K] with K a multiple of ", kMxBlock);
  const Shape w{codes.size(0), codes.size(1), x.size(1)};
  AMBER_CHECK(codes.shape() == mxfp4_values_shape(w) && codes.dtype() == DType::u8, op, ": codes ", codes.shape(), " ",
              dtype_name(codes.dtype()), " must be u8 ", mxfp4_values_shape(w), " for input ", x.shape());
  AMBER_CHECK(scales.shape() == mx_scales_shape(w) && scales.dtype() == DType::e8m0, op, ": scales ",
              scales.shape(), " ", dtype_name(scales.dtype()), " must be e8m0 ", mx_scales_shape(w));
  AMBER_CHECK(offsets.dtype() == DType::i32 && offsets.shape() == Shape({codes.size(0) + 1}), op, ": offsets ",
              offsets.shape(), " must be i32 [", codes.size(0) + 1, "]");
  for (const Tensor* t : {&x, &codes, &scales, &offsets}) require_contiguous(*t, op);
}

// The CPU's MXFP4 weights dequantized for an output of dtype `out`: f64 for the oracle,
// else f32.
Tensor dequantized_mxfp4(const Tensor& codes, const Tensor& scales, int64_t k, DType out) {
  Tensor w = Tensor::empty({codes.size(0), codes.size(1), k}, out == DType::f64 ? DType::f64 : DType::f32);
  dequantize_mxfp4(codes, scales, w);
  return w;
}

}  // namespace

void grouped_gemm_forward(const Tensor& x, const Tensor& w, const Tensor& offsets, Tensor& y,
                          const Tensor& row_scale) {
  const char* op = "grouped_gemm_forward";
  AMBER_CHECK(w.ndim() == 3 && x.ndim() == 2 && x.size(1) == w.size(2), op, ": input ", x.shape(),
              " does not match weights ", w.shape(), " ([experts, N, K] against [rows, K])");
  AMBER_CHECK(y.shape() == Shape({x.size(0), w.size(1)}), op, ": output ", y.shape(), " must be [", x.size(0), ", ",
              w.size(1), "] for input ", x.shape(), " and weights ", w.shape());
  check_operands(op, {&x, &w, &y}, offsets, w.size(0));
  if (row_scale.defined()) {
    const bool f32_or_checked = row_scale.dtype() == DType::f32 || (x.dtype() == DType::f64 && row_scale.dtype() == DType::f64);
    AMBER_CHECK(f32_or_checked && row_scale.shape() == Shape({x.size(0)}), op, ": row scales ", row_scale.shape(), " ",
                dtype_name(row_scale.dtype()), " must be f32 [", x.size(0), "] (f64 beside f64 operands)");
    require_contiguous(row_scale, op);
  }
  call_repeatable(op, [&] {
    AMBER_ON_DEVICE(ops::common_device(op, {&x, &w, &offsets, &y, &row_scale}), op,
                    cuda::grouped_gemm_forward(x, w, offsets, y, row_scale),
                    cpu::grouped_gemm_forward(x, w, offsets, y, row_scale));
  });
}

void grouped_gemm_swiglu_forward(const Tensor& x, const Tensor& w, const Tensor& offsets, Tensor& gate_up,
                                 Tensor& h) {
  const char* op = "grouped_gemm_swiglu_forward";
  AMBER_CHECK(w.ndim() == 3 && w.size(1) % 2 == 0 && x.ndim() == 2 && x.size(1) == w.size(2), op, ": input ",
              x.shape(), " does not match weights ", w.shape(), " ([experts, 2H, K] against [rows, K])");
  AMBER_CHECK(h.shape() == Shape({x.size(0), w.size(1) / 2}), op, ": h ", h.shape(), " must be [", x.size(0), ", ",
              w.size(1) / 2, "] for input ", x.shape(), " and weights ", w.shape());
  AMBER_CHECK(!gate_up.defined() || gate_up.shape() == Shape({x.size(0), w.size(1)}), op, ": gate_up ",
              gate_up.shape(), " must be [", x.size(0), ", ", w.size(1), "]");
  check_operands(op, {&x, &w, &h, &gate_up}, offsets, w.size(0));
  call_repeatable(op, [&] {
    AMBER_ON_DEVICE(ops::common_device(op, {&x, &w, &offsets, &h, &gate_up}), op,
                    cuda::grouped_gemm_swiglu_forward(x, w, offsets, gate_up, h),
                    cpu::grouped_gemm_swiglu_forward(x, w, offsets, gate_up, h));
  });
}

void grouped_gemm_backward_input(const Tensor& dy, const Tensor& w, const Tensor& offsets, Tensor& dx) {
  const char* op = "grouped_gemm_backward_input";
  AMBER_CHECK(w.ndim() == 3 && dy.ndim() == 2 && dy.size(1) == w.size(1), op, ": grad ", dy.shape(),
              " does not match weights ", w.shape(), " ([experts, N, K] against [rows, N])");
  AMBER_CHECK(dx.shape() == Shape({dy.size(0), w.size(2)}), op, ": dx ", dx.shape(), " must be [", dy.size(0), ", ",
              w.size(2), "]");
  check_operands(op, {&dy, &w, &dx}, offsets, w.size(0));
  call_repeatable(op, [&] {
    AMBER_ON_DEVICE(ops::common_device(op, {&dy, &w, &offsets, &dx}), op,
                    cuda::grouped_gemm_backward_input(dy, w, offsets, dx),
                    cpu::grouped_gemm_backward_input(dy, w, offsets, dx));
  });
}

Shape grouped_weight_squares_shape(const Shape& dw) {
  AMBER_CHECK(dw.ndim() == 3, "grouped_weight_squares_shape: a weight gradient is [experts, N, K], got ", dw);
  return {dw[0], 8 * ((dw[1] + 127) / 128), (dw[2] + 127) / 128};
}

void grouped_gemm_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& offsets, Tensor& dw,
                                  bool accumulate, Tensor* squares) {
  const char* op = "grouped_gemm_backward_weight";
  AMBER_CHECK(dy.ndim() == 2 && x.ndim() == 2 && dy.size(0) == x.size(0), op, ": grad ", dy.shape(), " and input ",
              x.shape(), " must be [rows, N] and [rows, K] with one row count");
  AMBER_CHECK(dw.ndim() == 3 && dw.size(1) == dy.size(1) && dw.size(2) == x.size(1), op, ": dw ", dw.shape(),
              " must be [experts, ", dy.size(1), ", ", x.size(1), "]");
  check_operands(op, {&dy, &x}, offsets, dw.size(0));
  require_contiguous(dw, op);
  AMBER_CHECK(dw.dtype() == DType::f32 || dw.dtype() == x.dtype(), op, ": dw holds ", dtype_name(dw.dtype()),
              "; it must be f32 or the operands' ", dtype_name(x.dtype()));
  if (squares)
    AMBER_CHECK(squares->dtype() == DType::f64 && squares->shape() == grouped_weight_squares_shape(dw.shape()) &&
                    squares->is_contiguous(),
                op, ": the squares must be a contiguous f64 ", grouped_weight_squares_shape(dw.shape()), ", got ",
                dtype_name(squares->dtype()), " ", squares->shape());
  const Tensor none;
  const auto on_cpu = [&] {
    cpu::grouped_gemm_backward_weight(dy, x, offsets, dw, accumulate);
    if (squares) cpu::block_squares(dw, *squares);
  };
  const auto work = [&] {
    AMBER_ON_DEVICE(ops::common_device(op, {&dy, &x, &offsets, &dw, squares ? squares : &none}), op,
                    cuda::grouped_gemm_backward_weight(dy, x, offsets, dw, accumulate, squares), on_cpu());
  };
  if (accumulate)
    work();
  else
    call_repeatable(op, work);
}

void grouped_gemm_forward_fp8(const Tensor& x, const Tensor& x_scales, const Tensor& w, const Tensor& w_scales,
                              const Tensor& offsets, Tensor& y, const Tensor& row_scale) {
  const char* op = "grouped_gemm_forward_fp8";
  check_fp8_operands(op, x, x_scales, w, w_scales, offsets);
  AMBER_CHECK(y.shape() == Shape({x.size(0), w.size(1)}) && is_floating(y.dtype()), op, ": output ", y.shape(), " ",
              dtype_name(y.dtype()), " must be floating [", x.size(0), ", ", w.size(1), "]");
  require_contiguous(y, op);
  if (row_scale.defined())
    AMBER_CHECK(row_scale.dtype() == DType::f32 && row_scale.shape() == Shape({x.size(0)}), op, ": row scales ",
                row_scale.shape(), " ", dtype_name(row_scale.dtype()), " must be f32 [", x.size(0), "]");
  const auto on_cpu = [&] {
    const Dequantized d = dequantized(x, x_scales, w, w_scales, y.dtype());
    cpu::grouped_gemm_forward(d.x, d.w, offsets, y, row_scale);
  };
  call_repeatable(op, [&] {
    AMBER_ON_DEVICE(ops::common_device(op, {&x, &x_scales, &w, &w_scales, &offsets, &y, &row_scale}), op,
                    cuda::grouped_gemm_forward_fp8(x, x_scales, w, w_scales, offsets, y, row_scale), on_cpu());
  });
}

void grouped_gemm_swiglu_forward_fp8(const Tensor& x, const Tensor& x_scales, const Tensor& w,
                                     const Tensor& w_scales, const Tensor& offsets, Tensor& gate_up, Tensor& h) {
  const char* op = "grouped_gemm_swiglu_forward_fp8";
  check_fp8_operands(op, x, x_scales, w, w_scales, offsets);
  AMBER_CHECK(w.size(1) % 2 == 0 && h.shape() == Shape({x.size(0), w.size(1) / 2}) && is_floating(h.dtype()), op,
              ": h ", h.shape(), " must be floating [", x.size(0), ", ", w.size(1) / 2, "]");
  AMBER_CHECK(!gate_up.defined() || (gate_up.shape() == Shape({x.size(0), w.size(1)}) && gate_up.dtype() == h.dtype()),
              op, ": gate_up ", gate_up.shape(), " must be [", x.size(0), ", ", w.size(1), "] of h's dtype");
  require_contiguous(h, op);
  if (gate_up.defined()) require_contiguous(gate_up, op);
  const auto on_cpu = [&] {
    const Dequantized d = dequantized(x, x_scales, w, w_scales, h.dtype());
    cpu::grouped_gemm_swiglu_forward(d.x, d.w, offsets, gate_up, h);
  };
  call_repeatable(op, [&] {
    AMBER_ON_DEVICE(ops::common_device(op, {&x, &x_scales, &w, &w_scales, &offsets, &h, &gate_up}), op,
                    cuda::grouped_gemm_swiglu_forward_fp8(x, x_scales, w, w_scales, offsets, gate_up, h), on_cpu());
  });
}

void grouped_gemm_forward_mxfp4(const Tensor& x, const Tensor& codes, const Tensor& scales, const Tensor& offsets,
                                Tensor& y, const Tensor& row_scale) {
  const char* op = "grouped_gemm_forward_mxfp4";
  check_mxfp4_operands(op, x, codes, scales, offsets);
  AMBER_CHECK(y.shape() == Shape({x.size(0), codes.size(1)}) && is_floating(y.dtype()), op, ": output ", y.shape(),
              " must be floating [", x.size(0), ", ", codes.size(1), "]");
  require_contiguous(y, op);
  if (row_scale.defined())
    AMBER_CHECK(row_scale.dtype() == DType::f32 && row_scale.shape() == Shape({x.size(0)}), op, ": row scales ",
                row_scale.shape(), " ", dtype_name(row_scale.dtype()), " must be f32 [", x.size(0), "]");
  const auto on_cpu = [&] {
    const Tensor w = dequantized_mxfp4(codes, scales, x.size(1), y.dtype());
    cpu::grouped_gemm_forward(x.to(w.dtype()), w, offsets, y, row_scale);
  };
  call_repeatable(op, [&] {
    AMBER_ON_DEVICE(ops::common_device(op, {&x, &codes, &scales, &offsets, &y, &row_scale}), op,
                    cuda::grouped_gemm_forward_mxfp4(x, codes, scales, offsets, y, row_scale), on_cpu());
  });
}

void grouped_gemm_swiglu_forward_mxfp4(const Tensor& x, const Tensor& codes, const Tensor& scales,
                                       const Tensor& offsets, Tensor& gate_up, Tensor& h) {
  const char* op = "grouped_gemm_swiglu_forward_mxfp4";
  check_mxfp4_operands(op, x, codes, scales, offsets);
  const int64_t n = codes.size(1);
  AMBER_CHECK(n % 2 == 0 && h.shape() == Shape({x.size(0), n / 2}) && is_floating(h.dtype()), op, ": h ", h.shape(),
              " must be floating [", x.size(0), ", ", n / 2, "]");
  AMBER_CHECK(!gate_up.defined() || (gate_up.shape() == Shape({x.size(0), n}) && gate_up.dtype() == h.dtype()), op,
              ": gate_up ", gate_up.shape(), " must be [", x.size(0), ", ", n, "] of h's dtype");
  require_contiguous(h, op);
  if (gate_up.defined()) require_contiguous(gate_up, op);
  const auto on_cpu = [&] {
    const Tensor w = dequantized_mxfp4(codes, scales, x.size(1), h.dtype());
    cpu::grouped_gemm_swiglu_forward(x.to(w.dtype()), w, offsets, gate_up, h);
  };
  call_repeatable(op, [&] {
    AMBER_ON_DEVICE(ops::common_device(op, {&x, &codes, &scales, &offsets, &h, &gate_up}), op,
                    cuda::grouped_gemm_swiglu_forward_mxfp4(x, codes, scales, offsets, gate_up, h), on_cpu());
  });
}

bool grouped_gemm_available(Device device) {
  bool available = true;
  AMBER_ON_DEVICE(device, "grouped_gemm_available", available = cuda::grouped_gemm_available(device.index),
                  available = true);
  return available;
}

void set_grouped_gemm_variant(const GroupedGemmVariant& variant) {
  AMBER_CHECK(variant.tile_n == 0 || variant.tile_n == 128 || variant.tile_n == 256,
              "set_grouped_gemm_variant: tiles are 128 or 256 columns wide (0: chosen by shape), not ", variant.tile_n);
#ifdef AMBER_WITH_CUDA
  cuda::grouped_variant() = cuda::GroupedVariant{variant.store_partition, variant.split_scales, variant.tile_n};
#endif
}

}  // namespace amber
