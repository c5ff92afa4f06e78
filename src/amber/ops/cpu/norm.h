// CPU implementations behind ops/norm.h (inputs validated by the entry points).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "amber/core/tensor.h"
#include "amber/ops/cpu/vector_math.h"

namespace amber::cpu {

void rmsnorm_forward(const Tensor& x, const Tensor& weight, double eps, Tensor& y, Tensor& rstd);
void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                      Tensor& dx, Tensor& dweight, bool accumulate);
void layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                       Tensor& y, Tensor& mean, Tensor& rstd);
void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias, bool accumulate);

// One RMSNorm row, shared by rmsnorm and the fused QK-norm (ops/cpu/rope.cpp) so the
// two round alike. The row sums run in lanes, in a fixed order.

// 1 / sqrt(mean(x^2) + eps) over the d elements of x.
template <class T>
[[gnu::always_inline]] inline T rms_scale(const T* x, int64_t d, double eps) {
  const T squares = fixed_order_sum_of<T>(d, [x](int64_t j) { return x[j] * x[j]; });
  return T(1) / std::sqrt(squares / static_cast<T>(d) + static_cast<T>(eps));
}

// The row's input gradient, y = x inv w: dx = inv (g w - x c), c = (g w . x) inv^2 / d,
// added to dx where `accumulate`; w null means a weight of ones.
template <class T>
[[gnu::always_inline]] inline void rms_backward_row(const T* g, const T* x, const T* w, T inv, int64_t d, T* dx,
                                                    bool accumulate) {
  const T dot = fixed_order_sum_of<T>(d, [&](int64_t j) { return g[j] * (w ? w[j] : T(1)) * x[j]; });
  const T c = dot * inv * inv / static_cast<T>(d);
  for (int64_t j = 0; j < d; ++j) dx[j] = (accumulate ? dx[j] : T(0)) + inv * (g[j] * (w ? w[j] : T(1)) - x[j] * c);
}

// A weight gradient over many rows: each block of kRowBlock rows sums into its own
// partial row, and the partial rows are added in block order, so the bits do not depend
// on the thread count. Shared by the norms and the fused QK-norm.
inline constexpr int64_t kRowBlock = 64;

// Sums per-block partial rows [blocks, d] into out (+=), blocks in order.
template <class T>
void reduce_blocks(const std::vector<T>& partial, int64_t blocks, int64_t d, T* out) {
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t j = 0; j < d; ++j) out[j] += partial[b * d + j];
}

}  // namespace amber::cpu
