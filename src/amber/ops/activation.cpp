// Entry points of ops/activation.h: shared validation, then the device switch.
#include "amber/ops/activation.h"

#include "amber/ops/cpu/activation.h"
#include "amber/ops/cuda/activation/activation.h"
#include "amber/ops/device_switch.h"

namespace amber {
namespace {

void check_glu(const Tensor& gate_up, const Tensor& h, const char* op) {
  AMBER_CHECK(gate_up.ndim() == 2 && gate_up.size(1) % 2 == 0, op, ": gate_up ", gate_up.shape(),
              " must be [N, 2H]");
  AMBER_CHECK(h.ndim() == 2 && h.size(0) == gate_up.size(0) && h.size(1) * 2 == gate_up.size(1), op,
              ": h ", h.shape(), " does not match gate_up ", gate_up.shape());
}

}  // namespace

void swiglu_forward(const Tensor& gate_up, Tensor& h) {
  const char* op = "swiglu_forward";
  check_glu(gate_up, h, op);
  AMBER_ON_DEVICE(ops::common_device(op, {&gate_up, &h}), op, cuda::swiglu_forward(gate_up, h),
                  cpu::swiglu_forward(gate_up, h));
}

void swiglu_backward(const Tensor& dh, const Tensor& gate_up, Tensor& dgate_up) {
  const char* op = "swiglu_backward";
  check_glu(gate_up, dh, op);
  require_same_shape(gate_up, dgate_up, op);
  AMBER_ON_DEVICE(ops::common_device(op, {&dh, &gate_up, &dgate_up}), op,
                  cuda::swiglu_backward(dh, gate_up, dgate_up),
                  cpu::swiglu_backward(dh, gate_up, dgate_up));
}

void geglu_forward(const Tensor& gate_up, Tensor& h) {
  const char* op = "geglu_forward";
  check_glu(gate_up, h, op);
  AMBER_ON_DEVICE(ops::common_device(op, {&gate_up, &h}), op, cuda::geglu_forward(gate_up, h),
                  cpu::geglu_forward(gate_up, h));
}

void geglu_backward(const Tensor& dh, const Tensor& gate_up, Tensor& dgate_up) {
  const char* op = "geglu_backward";
  check_glu(gate_up, dh, op);
  require_same_shape(gate_up, dgate_up, op);
  AMBER_ON_DEVICE(ops::common_device(op, {&dh, &gate_up, &dgate_up}), op,
                  cuda::geglu_backward(dh, gate_up, dgate_up),
                  cpu::geglu_backward(dh, gate_up, dgate_up));
}

void gelu_forward(const Tensor& x, Tensor& y) {
  const char* op = "gelu_forward";
  require_same_shape(x, y, op);
  AMBER_ON_DEVICE(ops::common_device(op, {&x, &y}), op, cuda::gelu_forward(x, y),
                  cpu::gelu_forward(x, y));
}

void gelu_backward(const Tensor& dy, const Tensor& x, Tensor& dx) {
  const char* op = "gelu_backward";
  require_same_shape(x, dy, op);
  require_same_shape(x, dx, op);
  AMBER_ON_DEVICE(ops::common_device(op, {&dy, &x, &dx}), op, cuda::gelu_backward(dy, x, dx),
                  cpu::gelu_backward(dy, x, dx));
}

}  // namespace amber
