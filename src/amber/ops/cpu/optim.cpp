// CPU optimizer math. Newton-Schulz runs its matrix products through the same GEMM
// entry point as the model, in the requested compute type.
#include "amber/ops/optim.h"

#include <cmath>
#include <vector>

#include "amber/ops/cpu/dispatch.h"
#include "amber/ops/elementwise.h"
#include "amber/ops/gemm.h"

namespace amber {

void adamw_step(Tensor& value, const Tensor& grad, Tensor& m, Tensor& v, const AdamWHyper& h) {
  cpu::require_cpu(value, "adamw_step");
  require_same_shape(value, grad, "adamw_step grad");
  require_same_shape(value, m, "adamw_step first moment");
  require_same_shape(value, v, "adamw_step second moment");
  AMBER_CHECK(h.step >= 1, "adamw_step: step must be >= 1, got ", h.step);
  cpu::with_compute_type(value.dtype(), [&]<class T>() {
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

NewtonSchulz newton_schulz_from_name(const std::string& name) {
  if (name == "cubic5") return NewtonSchulz::cubic5;
  if (name == "quintic5") return NewtonSchulz::quintic5;
  fail("unknown Newton-Schulz variant '", name, "'; valid: cubic5, quintic5");
}

void newton_schulz_orthogonalize(Tensor& g, NewtonSchulz variant, DType compute) {
  AMBER_CHECK(g.ndim() == 2, "newton_schulz_orthogonalize takes a matrix, got ", g.shape());
  // Iterate on the short side: X is [m, n] with m <= n, so X X^T is the small Gram.
  const bool transposed = g.size(0) > g.size(1);
  const Tensor source = transposed ? g.transpose(0, 1) : g;
  const int64_t m = source.size(0), n = source.size(1);
  Tensor x = Tensor::empty({m, n}, compute);
  x.copy_from(source);
  const double norm = std::sqrt(squared_norm(x));
  scale_(x, 1.0 / (std::max(norm, 1e-7) * 1.01));
  Tensor gram = Tensor::empty({m, m}, compute), poly = Tensor::empty({m, m}, compute);
  Tensor next = Tensor::empty({m, n}, compute);
  for (int step = 0; step < 5; ++step) {
    gemm(x, false, x, true, gram);  // G = X X^T
    double a, b, c = 0.0;
    if (variant == NewtonSchulz::quintic5) {
      a = 3.4445, b = -4.7750, c = 2.0315;  // X <- aX + (bG + cG^2) X
    } else {
      // The cubic per-step schedule: X <- (aI + bG) X, landing singular values in
      // roughly [0.77, 1.30] at two thirds of the quintic's FLOPs.
      static constexpr double kCubic[5][2] = {{3.3656576, -3.3420992}, {2.5744352, -1.4957376},
                                              {2.5368962, -1.4312570}, {2.4418906, -1.2764040},
                                              {2.2230472, -0.9630650}};
      a = kCubic[step][0], b = kCubic[step][1];
    }
    // poly = bG + cG^2
    if (c != 0.0) {
      gemm(gram, false, gram, false, poly, c, 0.0);
      add_scaled(poly, gram, b);
    } else {
      scale_into(poly, gram, b);
    }
    // next = a X + poly X
    next.copy_from(x);
    gemm(poly, false, x, false, next, 1.0, a);
    std::swap(x, next);
  }
  g.copy_from(transposed ? x.transpose(0, 1) : x);
}

double squared_norm(const Tensor& t) {
  cpu::require_cpu(t, "squared_norm");
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

void scale_(Tensor& t, double alpha) { scale_into(t, t, alpha); }

bool all_finite(const Tensor& t) {
  cpu::require_cpu(t, "all_finite");
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

}  // namespace amber
