// Helpers shared by the op tests: random inputs from the Philox stream, relative
// error against a float64 reference, central finite differences, a tensor's bytes.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "amber/core/random.h"
#include "amber/core/tensor.h"

namespace amber::testing {

inline Tensor random_tensor(Shape shape, DType dtype, uint64_t seed, float std = 1.0f,
                            float mean = 0.0f) {
  Tensor t = Tensor::empty(shape, DType::f64);
  fill_normal(t, seed, 0, mean, std);
  return t.to(dtype);
}

// Every byte of t, wherever it lives.
inline std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor c = t.to(Device::cpu());
  const auto* p = static_cast<const uint8_t*>(c.raw());
  return std::vector<uint8_t>(p, p + c.numel() * dtype_size(c.dtype()));
}

// ||got - ref||_2 / ||ref||_2, computed in double; NaN anywhere gives +inf.
inline double relative_error(const Tensor& got, const Tensor& ref) {
  const std::vector<double> a = got.to_doubles(), b = ref.to_doubles();
  EXPECT_EQ(a.size(), b.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

// Checks d(loss)/d(x) at `coordinates` evenly spaced entries of the f64 tensor `x`
// against `analytic` by central differences with step `eps`. `loss` must recompute
// from the current contents of `x`. Returns the worst relative error, where each
// coordinate's error is |fd - an| / max(|fd|, |an|, 1e-3 * rms(analytic)): the floor
// keeps round-off on near-zero components from dominating, while any real error in
// a gradient of ordinary size still shows up at full weight.
inline double finite_difference_error(Tensor& x, const Tensor& analytic,
                                      const std::function<double()>& loss, int coordinates = 24,
                                      double eps = 1e-5) {
  EXPECT_EQ(x.dtype(), DType::f64);
  const int64_t n = x.numel();
  const int count = static_cast<int>(std::min<int64_t>(coordinates, n));
  double worst = 0;
  double* data = x.data<double>();
  const std::vector<double> grad = analytic.to_doubles();
  double sum_sq = 0;
  for (double g : grad) sum_sq += g * g;
  const double floor = 1e-3 * std::sqrt(sum_sq / std::max<size_t>(grad.size(), 1)) + 1e-300;
  for (int c = 0; c < count; ++c) {
    const int64_t i = count == 1 ? 0 : (c * (n - 1)) / (count - 1);
    const double saved = data[i];
    data[i] = saved + eps;
    const double up = loss();
    data[i] = saved - eps;
    const double down = loss();
    data[i] = saved;
    const double fd = (up - down) / (2 * eps);
    const double scale = std::max({std::fabs(fd), std::fabs(grad[i]), floor});
    worst = std::max(worst, std::fabs(fd - grad[i]) / scale);
  }
  return worst;
}

// A fixed random projection of an output, so a scalar loss exercises every element.
inline double project(const Tensor& out, const Tensor& weights) {
  const std::vector<double> a = out.to_doubles(), w = weights.to_doubles();
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * w[i];
  return s;
}

}  // namespace amber::testing
