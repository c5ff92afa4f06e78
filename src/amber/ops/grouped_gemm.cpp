// Entry points of ops/grouped_gemm.h: shapes validated with the names of the operands,
// then the device switch.
#include "amber/ops/grouped_gemm.h"

#include "amber/core/op_hook.h"
#include "amber/ops/cpu/grouped_gemm.h"
#include "amber/ops/cuda/grouped/grouped_gemm.h"
#include "amber/ops/device_switch.h"

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
    AMBER_CHECK(row_scale.dtype() == DType::f32 && row_scale.shape() == Shape({x.size(0)}), op, ": row scales ",
                row_scale.shape(), " ", dtype_name(row_scale.dtype()), " must be f32 [", x.size(0), "]");
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

void grouped_gemm_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& offsets, Tensor& dw,
                                  bool accumulate) {
  const char* op = "grouped_gemm_backward_weight";
  AMBER_CHECK(dy.ndim() == 2 && x.ndim() == 2 && dy.size(0) == x.size(0), op, ": grad ", dy.shape(), " and input ",
              x.shape(), " must be [rows, N] and [rows, K] with one row count");
  AMBER_CHECK(dw.ndim() == 3 && dw.size(1) == dy.size(1) && dw.size(2) == x.size(1), op, ": dw ", dw.shape(),
              " must be [experts, ", dy.size(1), ", ", x.size(1), "]");
  check_operands(op, {&dy, &x}, offsets, dw.size(0));
  require_contiguous(dw, op);
  AMBER_CHECK(dw.dtype() == DType::f32 || dw.dtype() == x.dtype(), op, ": dw holds ", dtype_name(dw.dtype()),
              "; it must be f32 or the operands' ", dtype_name(x.dtype()));
  const auto work = [&] {
    AMBER_ON_DEVICE(ops::common_device(op, {&dy, &x, &offsets, &dw}), op,
                    cuda::grouped_gemm_backward_weight(dy, x, offsets, dw, accumulate),
                    cpu::grouped_gemm_backward_weight(dy, x, offsets, dw, accumulate));
  };
  if (accumulate)
    work();
  else
    call_repeatable(op, work);
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
  cuda::grouped_variant() = cuda::GroupedVariant{variant.store_partition, variant.tile_n};
#endif
}

}  // namespace amber
