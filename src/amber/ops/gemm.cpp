// Entry points of ops/gemm.h: shared validation, then the device switch. The linear
// layer is composed here from gemm and the bias helpers of each device.
#include "amber/ops/gemm.h"

#include "amber/core/op_hook.h"
#include "amber/ops/cpu/gemm.h"
#include "amber/ops/cuda/gemm/gemm.h"
#include "amber/ops/device_switch.h"

namespace amber {
namespace {

// The CPU runs a batch of products one after another.
void cpu_gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, double alpha, double beta,
              const Tensor& addend) {
  if (a.ndim() == 2) return cpu::gemm(a, ta, b, tb, c, alpha, beta, addend);
  for (int64_t i = 0; i < a.size(0); ++i) {
    Tensor ci = c.select(0, i);
    const Tensor addend_i = addend.defined() ? addend.select(0, i) : Tensor();
    cpu::gemm(a.select(0, i), ta, b.select(0, i), tb, ci, alpha, beta, addend_i);
  }
}

}  // namespace

void gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, double alpha, double beta,
          const Tensor& addend) {
  const int dims = a.ndim();
  AMBER_CHECK((dims == 2 || dims == 3) && b.ndim() == dims && c.ndim() == dims,
              "gemm takes 2-D tensors, or 3-D ones for a batch of products, got ", a.shape(), " ", b.shape(), " ",
              c.shape());
  const int64_t m = ta ? a.size(-1) : a.size(-2), k = ta ? a.size(-2) : a.size(-1);
  const int64_t kb = tb ? b.size(-1) : b.size(-2), n = tb ? b.size(-2) : b.size(-1);
  AMBER_CHECK(k == kb && c.size(-2) == m && c.size(-1) == n, "gemm shapes do not agree: op(a) ", m,
              "x", k, ", op(b) ", kb, "x", n, ", c ", c.shape());
  if (dims == 3) {
    AMBER_CHECK(b.size(0) == a.size(0) && c.size(0) == a.size(0),
                "gemm: a batch of products needs one batch size, got ", a.shape(), " ", b.shape(), " ", c.shape());
    for (const Tensor* t : {&a, &b, static_cast<const Tensor*>(&c)}) require_contiguous(*t, "gemm (batched)");
  }
  if (addend.defined())
    AMBER_CHECK(addend.shape() == c.shape() && addend.dtype() == c.dtype() && addend.device() == c.device(),
                "gemm: addend ", addend.shape(), " ", dtype_name(addend.dtype()), " does not match c ", c.shape(), " ",
                dtype_name(c.dtype()), " on the same device");
  // A product that reads c (beta, or c as its own addend) would not repeat its bits.
  const bool reads_c = beta != 0.0 || (addend.defined() && addend.raw() == c.raw());
  const auto work = [&] {
    AMBER_ON_DEVICE(ops::common_device("gemm", {&a, &b, &c}), "gemm", cuda::gemm(a, ta, b, tb, c, alpha, beta, addend),
                    cpu_gemm(a, ta, b, tb, c, alpha, beta, addend));
  };
  if (reads_c)
    work();
  else
    call_repeatable("gemm", work);
}

void set_gemm_tuning(const GemmTuning& tuning) {
#ifdef AMBER_WITH_CUDA
  cuda::set_gemm_tuning(tuning.measured, tuning.file);
#else
  (void)tuning;
#endif
}

std::vector<double> gemm_algorithm_times(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, double beta,
                                         int count, int repeats) {
  const char* op = "gemm_algorithm_times";
  std::vector<double> ms;
  AMBER_ON_DEVICE(ops::common_device(op, {&a, &b, &c}), op,
                  ms = cuda::time_gemm_algorithms(a, ta, b, tb, c, beta, count, repeats),
                  fail(op, ": cuBLASLt's algorithms exist on a GPU only; use --device cuda"));
  return ms;
}

void linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, const Tensor& residual,
                    double scale) {
  AMBER_CHECK(x.ndim() == 2 && w.ndim() == 2 && x.size(1) == w.size(1), "linear: input ",
              x.shape(), " does not match weight ", w.shape(), " ([out, in])");
  AMBER_CHECK(!bias.defined() || !residual.defined() || scale == 1.0,
              "linear: a bias with a residual add needs scale 1, got ", scale);
  if (residual.defined())
    gemm(x, false, w, true, y, scale, 1.0, residual);
  else
    gemm(x, false, w, true, y);
  if (!bias.defined()) return;
  AMBER_CHECK(bias.ndim() == 1 && bias.size(0) == w.size(0), "linear: bias ", bias.shape(),
              " does not match weight ", w.shape());
  AMBER_ON_DEVICE(ops::common_device("linear_forward", {&y, &bias}), "linear_forward",
                  cuda::add_bias(y, bias), cpu::add_bias(y, bias));
}

void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw,
                     Tensor& dbias, bool accumulate_dw) {
  AMBER_CHECK(dy.ndim() == 2 && dy.size(0) == x.size(0) && dy.size(1) == w.size(0),
              "linear backward: grad ", dy.shape(), " does not match input ", x.shape(),
              " and weight ", w.shape());
  if (dx.defined()) gemm(dy, false, w, false, dx, 1.0, 0.0);
  gemm(dy, true, x, false, dw, 1.0, accumulate_dw ? 1.0 : 0.0);
  if (!dbias.defined()) return;
  AMBER_CHECK(dbias.numel() == dy.size(1), "linear backward: bias grad ", dbias.shape(),
              " does not match grad ", dy.shape());
  AMBER_ON_DEVICE(ops::common_device("linear_backward", {&dy, &dbias}), "linear_backward",
                  cuda::bias_grad(dy, dbias), cpu::bias_grad(dy, dbias));
}

}  // namespace amber
