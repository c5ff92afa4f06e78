// Entry points of ops/glu_linear.h: the fused products where the GPU has them, else
// the product and the activation op.
#include "amber/ops/glu_linear.h"

#include "amber/core/op_hook.h"
#include "amber/ops/activation.h"
#include "amber/ops/cuda/gemm/glu_gemm.h"
#include "amber/ops/cuda/quant/glu_quant.h"
#include "amber/ops/device_switch.h"
#include "amber/ops/gemm.h"
#include "amber/ops/quant.h"

namespace amber {

bool glu_linear_forward(Glu glu, const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& gate_up, Tensor& h) {
  const char* op = "glu_linear_forward";
  AMBER_CHECK(w.ndim() == 2 && w.size(0) % 2 == 0, op, ": weight ", w.shape(), " must be [2H, in]");
  AMBER_CHECK(x.ndim() == 2 && x.size(1) == w.size(1), op, ": input ", x.shape(), " does not match weight ", w.shape(),
              " ([2H, in])");
  AMBER_CHECK(gate_up.shape() == Shape({x.size(0), w.size(0)}) && h.shape() == Shape({x.size(0), w.size(0) / 2}), op,
              ": gate_up ", gate_up.shape(), " and h ", h.shape(), " must be [N, 2H] and [N, H] for input ", x.shape(),
              " and weight ", w.shape());
  const auto once = [&] {
    bool fused = false;
    if (!bias.defined())
      AMBER_ON_DEVICE(ops::common_device(op, {&x, &w, &gate_up, &h}), op,
                      fused = cuda::glu_linear_forward(glu, x, w, gate_up, h), fused = false);
    if (fused) return true;
    linear_forward(x, w, bias, gate_up);
    glu_activation_forward(glu, gate_up, h);
    return false;
  };
  bool fused = false;
  call_repeatable(op, [&] { fused = once(); });
  return fused;
}

bool glu_linear_backward_input(Glu glu, const Tensor& dy, const Tensor& w_down, const Tensor& gate_up,
                               Tensor& dgate_up, Tensor& dh) {
  const char* op = "glu_linear_backward_input";
  AMBER_CHECK(w_down.ndim() == 2 && dy.ndim() == 2 && dy.size(1) == w_down.size(0), op, ": grad ", dy.shape(),
              " does not match the down weight ", w_down.shape(), " ([out, H])");
  AMBER_CHECK(gate_up.ndim() == 2 && gate_up.size(1) == 2 * w_down.size(1), op, ": gate_up ", gate_up.shape(),
              " does not match the down weight ", w_down.shape());
  AMBER_CHECK(gate_up.size(0) == dy.size(0) && dgate_up.shape() == gate_up.shape(), op, ": dgate_up ",
              dgate_up.shape(), " must match gate_up ", gate_up.shape(), ", with grad ", dy.shape(), "'s rows");
  const auto once = [&] {
    bool fused = false;
    AMBER_ON_DEVICE(ops::common_device(op, {&dy, &w_down, &gate_up, &dgate_up}), op,
                    fused = cuda::glu_linear_backward_input(glu, dy, w_down, gate_up, dgate_up), fused = false);
    if (fused) return true;
    gemm(dy, false, w_down, false, dh);
    glu_activation_backward(glu, dh, gate_up, dgate_up);
    return false;
  };
  bool fused = false;
  call_repeatable(op, [&] { fused = once(); });
  return fused;
}

namespace {

// dgate_up's shape and dtype for dh and gate_up, the checks both FP8 forms of the GLU's
// backward make first.
void check_glu_backward(const Tensor& dh, const Tensor& gate_up, const Tensor& dgate_up, const char* op) {
  AMBER_CHECK(dh.ndim() == 2 && gate_up.shape() == Shape({dh.size(0), 2 * dh.size(1)}) &&
                  dgate_up.shape() == gate_up.shape() && dgate_up.dtype() == dh.dtype(),
              op, ": gate_up ", gate_up.shape(), " and dgate_up ", dgate_up.shape(), " ", dtype_name(dgate_up.dtype()),
              " must be [N, 2H] (dgate_up in dh's dtype) for dh ", dh.shape(), " ", dtype_name(dh.dtype()));
  require_contiguous(dh, op);
  require_contiguous(gate_up, op);
}

// `fused` on `device` where it takes the tensors (it returns whether it ran), else
// `two_passes`, as one repeatable call of the op hook; returns whether `fused` ran.
template <class Fused, class TwoPasses>
bool fused_or_two_passes(const char* op, Device device, Fused&& fused, TwoPasses&& two_passes) {
  bool one_pass = false;
  call_repeatable(op, [&] {
    one_pass = false;
    AMBER_ON_DEVICE(device, op, one_pass = fused(), one_pass = false);
    if (!one_pass) two_passes();
  });
  return one_pass;
}

}  // namespace

bool glu_backward_fp8_rows_and_columns(Glu glu, const Tensor& dh, const Tensor& gate_up, Tensor& dgate_up,
                                       Tensor& values, Tensor& scales, Tensor& t_values, Tensor& t_scales) {
  const char* op = "glu_backward_fp8_rows_and_columns";
  check_glu_backward(dh, gate_up, dgate_up, op);
  check_fp8_rows_and_columns(dgate_up, values, scales, t_values, t_scales, op);
  if (dh.numel() == 0) return false;
  return fused_or_two_passes(
      op, ops::common_device(op, {&dh, &gate_up, &dgate_up, &values, &scales, &t_values, &t_scales}),
      [&] { return cuda::glu_backward_fp8_rows_and_columns(glu, dh, gate_up, values, scales, t_values, t_scales); },
      [&] {
        glu_activation_backward(glu, dh, gate_up, dgate_up);
        quantize_fp8_rows_and_columns(dgate_up, values, scales, t_values, t_scales);
      });
}

bool glu_backward_fp8_rows(Glu glu, const Tensor& dh, const Tensor& gate_up, Tensor& dgate_up, Tensor& values,
                           Tensor& scales) {
  const char* op = "glu_backward_fp8_rows";
  check_glu_backward(dh, gate_up, dgate_up, op);
  check_fp8_rows(dgate_up, values, scales, op);
  require_contiguous(dgate_up, op);
  if (dh.numel() == 0) return false;
  return fused_or_two_passes(
      op, ops::common_device(op, {&dh, &gate_up, &dgate_up, &values, &scales}),
      [&] { return cuda::glu_backward_fp8_rows(glu, dh, gate_up, dgate_up, values, scales); },
      [&] {
        glu_activation_backward(glu, dh, gate_up, dgate_up);
        quantize_fp8_rows(dgate_up, values, scales);
      });
}

void glu_activation_forward(Glu glu, const Tensor& gate_up, Tensor& h) {
  if (glu == Glu::swiglu)
    swiglu_forward(gate_up, h);
  else
    geglu_forward(gate_up, h);
}

void glu_activation_backward(Glu glu, const Tensor& dh, const Tensor& gate_up, Tensor& dgate_up) {
  if (glu == Glu::swiglu)
    swiglu_backward(dh, gate_up, dgate_up);
  else
    geglu_backward(dh, gate_up, dgate_up);
}

bool glu_epilogues(Device device) {
  bool available = false;
  AMBER_ON_DEVICE(device, "glu_epilogues", available = cuda::glu_epilogues(device.index), available = false);
  return available;
}

}  // namespace amber
