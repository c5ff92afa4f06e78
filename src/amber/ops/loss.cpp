// Entry points of ops/loss.h: shared validation, then the device switch.
#include "amber/ops/loss.h"

#include "amber/ops/cpu/loss.h"
#include "amber/ops/cuda/loss/loss.h"
#include "amber/ops/device_switch.h"

namespace amber {
namespace {

void check_shapes(const Tensor& x, const Tensor& w, const Tensor& targets, const char* op) {
  AMBER_CHECK(x.ndim() == 2 && w.ndim() == 2 && x.size(1) == w.size(1), op, ": hidden ", x.shape(),
              " does not match head weight ", w.shape(), " ([vocab, dim])");
  AMBER_CHECK(targets.dtype() == DType::i32 && targets.numel() == x.size(0), op,
              ": targets must be int32 [", x.size(0), "], got ", dtype_name(targets.dtype()), " ",
              targets.shape());
}

}  // namespace

void linear_cross_entropy_forward(const Tensor& x, const Tensor& w, const Tensor& targets,
                                  const CrossEntropyOptions& o, Tensor& losses, Tensor& lse) {
  const char* op = "linear_cross_entropy_forward";
  check_shapes(x, w, targets, op);
  AMBER_CHECK(o.chunk_tokens > 0, op, ": chunk_tokens must be positive");
  AMBER_ON_DEVICE(ops::common_device(op, {&x, &w, &targets, &losses, &lse}), op,
                  cuda::linear_cross_entropy_forward(x, w, targets, o, losses, lse),
                  cpu::linear_cross_entropy_forward(x, w, targets, o, losses, lse));
}

void linear_cross_entropy_backward(const Tensor& dlosses, const Tensor& x, const Tensor& w,
                                   const Tensor& targets, const Tensor& lse,
                                   const CrossEntropyOptions& o, Tensor& dx, Tensor& dw, bool accumulate_dw) {
  const char* op = "linear_cross_entropy_backward";
  check_shapes(x, w, targets, op);
  require_same_shape(x, dx, op);
  require_same_shape(w, dw, op);
  AMBER_CHECK(o.chunk_tokens > 0, op, ": chunk_tokens must be positive");
  AMBER_ON_DEVICE(ops::common_device(op, {&dlosses, &x, &w, &targets, &lse, &dx, &dw}), op,
                  cuda::linear_cross_entropy_backward(dlosses, x, w, targets, lse, o, dx, dw, accumulate_dw),
                  cpu::linear_cross_entropy_backward(dlosses, x, w, targets, lse, o, dx, dw, accumulate_dw));
}

void linear_cross_entropy_forward_backward(const Tensor& dlosses, const Tensor& x, const Tensor& w,
                                           const Tensor& targets, const CrossEntropyOptions& o,
                                           Tensor& losses, Tensor& lse, Tensor& dx, Tensor& dw,
                                           bool accumulate_dw) {
  const char* op = "linear_cross_entropy_forward_backward";
  check_shapes(x, w, targets, op);
  require_same_shape(x, dx, op);
  require_same_shape(w, dw, op);
  AMBER_CHECK(o.chunk_tokens > 0, op, ": chunk_tokens must be positive");
  AMBER_ON_DEVICE(ops::common_device(op, {&dlosses, &x, &w, &targets, &losses, &lse, &dx, &dw}), op,
                  cuda::linear_cross_entropy_forward_backward(dlosses, x, w, targets, o, losses, lse, dx, dw,
                                                              accumulate_dw),
                  cpu::linear_cross_entropy_forward_backward(dlosses, x, w, targets, o, losses, lse, dx, dw,
                                                             accumulate_dw));
}

void linear_cross_entropy_sums(const Tensor& losses, const Tensor& lse, const Tensor& targets,
                               const CrossEntropyOptions& o, Tensor& sums) {
  const char* op = "linear_cross_entropy_sums";
  const int64_t tokens = losses.numel();
  AMBER_CHECK(losses.ndim() == 1 && lse.shape() == losses.shape(), op, ": losses ", losses.shape(),
              " and lse ", lse.shape(), " must be one [tokens] vector each");
  AMBER_CHECK(targets.dtype() == DType::i32 && targets.numel() == tokens, op, ": targets must be int32 [",
              tokens, "], got ", dtype_name(targets.dtype()), " ", targets.shape());
  AMBER_CHECK(sums.dtype() == DType::f64 && sums.numel() == kLossSums, op, ": sums must be f64 [",
              kLossSums, "] (loss, z-loss, tokens), got ", dtype_name(sums.dtype()), " ", sums.shape());
  for (const Tensor* t : {&losses, &lse, &targets, static_cast<const Tensor*>(&sums)}) require_contiguous(*t, op);
  AMBER_ON_DEVICE(ops::common_device(op, {&losses, &lse, &targets, &sums}), op,
                  cuda::linear_cross_entropy_sums(losses, lse, targets, o, sums),
                  cpu::linear_cross_entropy_sums(losses, lse, targets, o, sums));
}

}  // namespace amber
