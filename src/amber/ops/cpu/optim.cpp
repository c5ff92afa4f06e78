// CPU optimizer math: the AdamW update and the reductions a step needs (squared
// norm in fixed blocks, so the sum never depends on the thread count; the global norm
// and its clip factor from those sums, in index order).
#include "amber/ops/cpu/optim.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "amber/ops/cpu/dispatch.h"
#include "amber/ops/cpu/elementwise.h"

namespace amber::cpu {

void adamw_step(Tensor& value, const Tensor& grad, Tensor& m, Tensor& v, const AdamWHyper& h) {
  with_compute_type(value.dtype(), [&]<class T>() {
    T *p = value.data<T>(), *pm = m.data<T>(), *pv = v.data<T>();
    const T* g = grad.data<T>();
    const T b1 = static_cast<T>(h.beta1), b2 = static_cast<T>(h.beta2);
    const T c1 = static_cast<T>(1.0 / (1.0 - std::pow(h.beta1, static_cast<double>(h.step))));
    const T c2 = static_cast<T>(1.0 / (1.0 - std::pow(h.beta2, static_cast<double>(h.step))));
    const T lr = static_cast<T>(h.lr), decay = static_cast<T>(h.lr * h.weight_decay);
    const T eps = static_cast<T>(h.eps);
    const int64_t n = value.numel();
#pragma omp parallel for if (n > 65536)
    for (int64_t i = 0; i < n; ++i) {
      pm[i] = b1 * pm[i] + (T(1) - b1) * g[i];
      pv[i] = b2 * pv[i] + (T(1) - b2) * g[i] * g[i];
      const T update = (pm[i] * c1) / (std::sqrt(pv[i] * c2) + eps);
      p[i] = p[i] - decay * p[i] - lr * update;
    }
  });
}

double squared_norm(const Tensor& t) {
  const Tensor c = t.contiguous();
  if (c.dtype() != DType::f32) {
    double total = 0;
    for (double x : c.to_doubles()) total += x * x;
    return total;
  }
  // Fixed blocks summed in order: the same bits for any thread count.
  constexpr int64_t kBlock = 8192;
  const float* p = c.data<float>();
  const int64_t n = c.numel(), blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<size_t>(blocks));
#pragma omp parallel for if (n > 65536)
  for (int64_t b = 0; b < blocks; ++b) {
    double s = 0;
    for (int64_t i = b * kBlock; i < std::min(n, (b + 1) * kBlock); ++i) s += static_cast<double>(p[i]) * p[i];
    partial[b] = s;
  }
  double total = 0;
  for (double s : partial) total += s;
  return total;
}

void norm_from_squares(const Tensor& squares, Tensor& out) {
  const double* s = squares.data<double>();
  double total = 0;
  for (int64_t i = 0; i < squares.numel(); ++i) total += s[i];
  out.data<double>()[0] = std::sqrt(total);
}

void clip_by_norm_(Tensor& t, const Tensor& norm, double max_norm) {
  const double n = norm.data<double>()[0];
  if (n > max_norm) scale_into(t, t, max_norm / n);
}

void divide_by_norm_(Tensor& t, const Tensor& squares, double floor, double margin) {
  scale_into(t, t, 1.0 / (std::max(std::sqrt(squares.data<double>()[0]), floor) * margin));
}

bool all_finite(const Tensor& t) {
  const Tensor c = t.contiguous();
  if (c.dtype() == DType::f32) {
    const float* p = c.data<float>();
    bool ok = true;
    const int64_t n = c.numel();
#pragma omp parallel for reduction(&& : ok) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) ok = ok && std::isfinite(p[i]);
    return ok;
  }
  for (double x : c.to_doubles())
    if (!std::isfinite(x)) return false;
  return true;
}

}  // namespace amber::cpu
