// Entry points of ops/elementwise.h: shared validation, then the device switch.
#include "amber/ops/elementwise.h"

#include <vector>

#include "amber/ops/cpu/elementwise.h"
#include "amber/ops/cuda/elementwise/elementwise.h"
#include "amber/ops/device_switch.h"

namespace amber {

void add_scaled(Tensor& x, const Tensor& y, double alpha) { add_scaled_into(x, x, y, alpha, "add_scaled"); }

void add_scaled_into(Tensor& out, const Tensor& x, const Tensor& y, double alpha, const char* op) {
  require_same_shape(out, x, op);
  require_same_shape(out, y, op);
  const Device device = ops::common_device(op, {&out, &x, &y});
  AMBER_ON_DEVICE(device, op, cuda::add_scaled_into(out, x, y, alpha, op), cpu::add_scaled_into(out, x, y, alpha));
}

void scale_into(Tensor& out, const Tensor& in, double alpha) {
  require_same_shape(out, in, "scale_into");
  const Device device = ops::common_device("scale_into", {&out, &in});
  AMBER_ON_DEVICE(device, "scale_into", cuda::scale_into(out, in, alpha),
                  cpu::scale_into(out, in, alpha));
}

void fill_from_scalar(Tensor& out, const Tensor& scalar) {
  const char* op = "fill_from_scalar";
  require_contiguous(out, op);
  AMBER_CHECK(scalar.dtype() == DType::f64 && scalar.numel() == 1, op, ": the scalar must be one f64 element, got ",
              dtype_name(scalar.dtype()), " ", scalar.shape());
  AMBER_ON_DEVICE(ops::common_device(op, {&out, &scalar}), op, cuda::fill_from_scalar(out, scalar),
                  cpu::fill_from_scalar(out, scalar));
}

void zero_all(std::span<Tensor> tensors) {
  const char* op = "zero_all";
  if (tensors.empty()) return;
  std::vector<const Tensor*> all;
  for (const Tensor& t : tensors) {
    require_contiguous(t, op);
    all.push_back(&t);
  }
  AMBER_ON_DEVICE(ops::common_device(op, all), op, cuda::zero_all(tensors), cpu::zero_all(tensors));
}

}  // namespace amber
