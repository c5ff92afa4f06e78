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

void advance_schedule(Tensor& schedule, const Tensor& gate, double beta1, double beta2) {
  double* s = schedule.data<double>();
  const double* g = gate.data<double>();
  s[kScheduleApply] = g[kGateApply];
  s[kScheduleLrMultiplier] = g[kGateLrMultiplier];
  s[kScheduleGradScale] = g[kGateGradScale];
  if (g[kGateApply] == 0.0) return;
  const double t = s[kScheduleSteps] + 1.0;
  s[kScheduleSteps] = t;
  s[kScheduleBias1] = 1.0 / (1.0 - std::pow(beta1, t));
  s[kScheduleBias2] = 1.0 / (1.0 - std::pow(beta2, t));
}

void finite_flag(const Tensor& values, Tensor& flag) {
  const double* v = values.data<double>();
  bool finite = true;
  for (int64_t i = 0; i < values.numel(); ++i) finite = finite && std::isfinite(v[i]);
  flag.data<double>()[0] = finite ? 1.0 : 0.0;
}

void adamw_step(Tensor& value, const Tensor& grad, Tensor& m, Tensor& v, const AdamWHyper& h,
                const Tensor& schedule, Tensor& work) {
  const double* s = schedule.data<double>();
  if (s[kScheduleApply] == 0.0) return;
  with_compute_type(value.dtype(), [&]<class T>() {
    T *p = value.data<T>(), *pm = m.data<T>(), *pv = v.data<T>();
    const T* g = grad.data<T>();
    const double lr_now = h.lr * s[kScheduleLrMultiplier];
    const T b1 = static_cast<T>(h.beta1), b2 = static_cast<T>(h.beta2);
    const T c1 = static_cast<T>(s[kScheduleBias1]), c2 = static_cast<T>(s[kScheduleBias2]);
    const T lr = static_cast<T>(lr_now), decay = static_cast<T>(lr_now * h.weight_decay);
    const T eps = static_cast<T>(h.eps), scale = static_cast<T>(s[kScheduleGradScale]);
    const int64_t n = value.numel();
#pragma omp parallel for if (n > 65536)
    for (int64_t i = 0; i < n; ++i) {
      const T gi = scale * g[i];
      pm[i] = b1 * pm[i] + (T(1) - b1) * gi;
      pv[i] = b2 * pv[i] + (T(1) - b2) * gi * gi;
      const T update = (pm[i] * c1) / (std::sqrt(pv[i] * c2) + eps);
      p[i] = p[i] - decay * p[i] - lr * update;
    }
  });
  if (!work.shares_storage_with(value)) work.copy_from(value);
}

void momentum_step(Tensor& momentum, const Tensor& grad, double mu, const Tensor& schedule) {
  const double* s = schedule.data<double>();
  if (s[kScheduleApply] == 0.0) return;
  with_compute_type(momentum.dtype(), [&]<class T>() {
    const Tensor gw = widened<T>(grad);
    Output<T> o(momentum, true);
    T* pm = o.data();
    const T* g = gw.data<T>();
    const T a = static_cast<T>(mu), scale = static_cast<T>(s[kScheduleGradScale]);
    const int64_t n = momentum.numel();
#pragma omp parallel for if (n > 65536)
    for (int64_t i = 0; i < n; ++i) pm[i] = a * pm[i] + scale * g[i];
    o.store();
  });
}

void apply_update(Tensor& value, const Tensor& update, double decay_rate, double update_rate,
                  const Tensor& schedule) {
  const double* s = schedule.data<double>();
  if (s[kScheduleApply] == 0.0) return;
  with_compute_type(value.dtype(), [&]<class T>() {
    const Tensor uw = widened<T>(update);
    Output<T> o(value, true);
    T* pv = o.data();
    const T* u = uw.data<T>();
    const T keep = static_cast<T>(1.0 - s[kScheduleLrMultiplier] * decay_rate);
    const T step = static_cast<T>(s[kScheduleLrMultiplier] * update_rate);
    const int64_t n = value.numel();
#pragma omp parallel for if (n > 65536)
    for (int64_t i = 0; i < n; ++i) pv[i] = keep * pv[i] - step * u[i];
    o.store();
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

void clip_scale(Tensor& scale, const Tensor& norm, double max_norm) {
  const double n = norm.data<double>()[0];
  if (n > max_norm) scale.data<double>()[0] = max_norm / n;
}

void divide_by_norm_(Tensor& t, const Tensor& squares, double floor, double margin) {
  const int64_t parts = squares.numel(), per = t.numel() / parts;
  Tensor flat = t.view(Shape{parts, per});
  for (int64_t i = 0; i < parts; ++i) {
    Tensor part = flat.select(0, i);
    scale_into(part, part, 1.0 / (std::max(std::sqrt(squares.data<double>()[i]), floor) * margin));
  }
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
