// Entry points of ops/norm.h: shared validation, then the device switch.
#include "amber/ops/norm.h"

#include "amber/core/op_hook.h"
#include "amber/ops/cpu/norm.h"
#include "amber/ops/cuda/norm/norm.h"
#include "amber/ops/device_switch.h"
#include "amber/ops/elementwise.h"

namespace amber {
namespace {

void check_rows(const Tensor& x, const Tensor& weight, const char* op) {
  AMBER_CHECK(x.ndim() >= 1, op, ": input must have at least one dimension");
  if (weight.defined())
    AMBER_CHECK(weight.ndim() == 1 && weight.size(0) == x.size(-1), op, ": weight ", weight.shape(),
                " does not match the last dimension of input ", x.shape());
}

void check_stat(const Tensor& x, const Tensor& stat, const char* what, const char* op) {
  const int64_t rows = x.numel() / std::max<int64_t>(x.size(-1), 1);
  AMBER_CHECK(stat.numel() == rows, op, ": ", what, " needs ", rows, " elements, has ", stat.numel());
}

void check_residual(const Tensor& x, const ResidualAdd& add, const char* op) {
  if (!add.residual) return;
  AMBER_CHECK(add.sum != nullptr, op, ": a residual add needs a sum tensor to write");
  require_same_shape(x, *add.residual, op);
  require_same_shape(x, *add.sum, op);
  AMBER_CHECK(add.residual->dtype() == x.dtype() && add.sum->dtype() == x.dtype(), op,
              ": the residual and the sum must have the input's dtype ", dtype_name(x.dtype()));
}

// The CPU reference of the fused add: the add, then the norm of the rounded sum.
const Tensor& cpu_sum(const Tensor& x, const ResidualAdd& add) {
  if (!add.residual) return x;
  add.sum->copy_from(x);
  add_scaled(*add.sum, *add.residual, add.scale);
  return *add.sum;
}

}  // namespace

DType norm_stat_dtype(DType dtype) { return dtype == DType::f64 ? DType::f64 : DType::f32; }

void rmsnorm_forward(const Tensor& x, const Tensor& weight, double eps, Tensor& y, Tensor& rstd,
                     const ResidualAdd& add) {
  const char* op = "rmsnorm_forward";
  check_rows(x, weight, op);
  require_same_shape(x, y, "rmsnorm_forward output");
  check_stat(x, rstd, "rstd", op);
  check_residual(x, add, op);
  const Tensor none;
  // A sum written over x or the residual would not repeat its bits.
  const bool in_place = add.residual && (add.sum->raw() == x.raw() || add.sum->raw() == add.residual->raw());
  const auto work = [&] {
    AMBER_ON_DEVICE(ops::common_device(op, {&x, &weight, &y, &rstd, add.residual ? add.residual : &none}), op,
                    cuda::rmsnorm_forward(x, weight, eps, y, rstd, add),
                    cpu::rmsnorm_forward(cpu_sum(x, add), weight, eps, y, rstd));
  };
  if (in_place)
    work();
  else
    call_repeatable(op, work);
}

void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                      Tensor& dx, Tensor& dweight, bool accumulate) {
  const char* op = "rmsnorm_backward";
  check_rows(x, weight, op);
  require_same_shape(x, dy, "rmsnorm_backward grad");
  require_same_shape(x, dx, "rmsnorm_backward input grad");
  check_stat(x, rstd, "rstd", op);
  AMBER_ON_DEVICE(ops::common_device(op, {&dy, &x, &weight, &rstd, &dx, &dweight}), op,
                  cuda::rmsnorm_backward(dy, x, weight, rstd, dx, dweight, accumulate),
                  cpu::rmsnorm_backward(dy, x, weight, rstd, dx, dweight, accumulate));
}

void layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                       Tensor& y, Tensor& mean, Tensor& rstd, const ResidualAdd& add) {
  const char* op = "layernorm_forward";
  check_rows(x, weight, op);
  require_same_shape(x, y, "layernorm_forward output");
  if (bias.defined())
    AMBER_CHECK(bias.ndim() == 1 && bias.size(0) == x.size(-1), "layernorm_forward: bias ",
                bias.shape(), " does not match input ", x.shape());
  check_stat(x, mean, "mean", op);
  check_stat(x, rstd, "rstd", op);
  check_residual(x, add, op);
  const Tensor none;
  AMBER_ON_DEVICE(ops::common_device(op, {&x, &weight, &bias, &y, &mean, &rstd, add.residual ? add.residual : &none}),
                  op, cuda::layernorm_forward(x, weight, bias, eps, y, mean, rstd, add),
                  cpu::layernorm_forward(cpu_sum(x, add), weight, bias, eps, y, mean, rstd));
}

void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias, bool accumulate) {
  const char* op = "layernorm_backward";
  check_rows(x, weight, op);
  require_same_shape(x, dy, "layernorm_backward grad");
  require_same_shape(x, dx, "layernorm_backward input grad");
  check_stat(x, mean, "mean", op);
  check_stat(x, rstd, "rstd", op);
  AMBER_ON_DEVICE(ops::common_device(op, {&dy, &x, &weight, &mean, &rstd, &dx, &dweight, &dbias}), op,
                  cuda::layernorm_backward(dy, x, weight, mean, rstd, dx, dweight, dbias, accumulate),
                  cpu::layernorm_backward(dy, x, weight, mean, rstd, dx, dweight, dbias, accumulate));
}

}  // namespace amber
