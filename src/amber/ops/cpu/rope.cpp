// CPU RoPE. Angles are formed in double from integer positions, so long contexts
// keep full precision; a cos/sin table covers the positions present in the batch.
#include "amber/ops/cpu/rope.h"

#include <algorithm>
#include <cmath>

#include "amber/ops/cpu/dispatch.h"

namespace amber::cpu {
namespace {

// sign = +1 rotates by +angle (forward), -1 by -angle (backward).
void rope_apply(const Tensor& x, const Tensor& positions, const RopeTable& table, Tensor& y,
                double sign, const char* op) {
  const int64_t tokens = x.size(0), heads = x.size(1), dim = x.size(2);
  const int half = table.rotary_dim / 2;
  const int32_t* pos = positions.data<int32_t>();
  int32_t max_pos = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    AMBER_CHECK(pos[t] >= 0, op, ": negative position ", pos[t], " at token ", t);
    max_pos = std::max(max_pos, pos[t]);
  }
  with_compute_type(x.dtype(), [&]<class T>() {
    std::vector<T> cos_t(static_cast<size_t>(max_pos + 1) * half), sin_t(cos_t.size());
#pragma omp parallel for if (max_pos > 1024)
    for (int32_t p = 0; p <= max_pos; ++p)
      for (int i = 0; i < half; ++i) {
        const double angle = p * table.inv_freq[i];
        cos_t[static_cast<size_t>(p) * half + i] = static_cast<T>(std::cos(angle) * table.attention_scale);
        sin_t[static_cast<size_t>(p) * half + i] =
            static_cast<T>(sign * std::sin(angle) * table.attention_scale);
      }
    const Tensor xw = widened<T>(x);
    Output<T> out(y);
    const T* px = xw.data<T>();
    T* py = out.data();
#pragma omp parallel for if (tokens * heads * dim > 65536)
    for (int64_t t = 0; t < tokens; ++t) {
      const T* c = cos_t.data() + static_cast<size_t>(pos[t]) * half;
      const T* s = sin_t.data() + static_cast<size_t>(pos[t]) * half;
      for (int64_t h = 0; h < heads; ++h) {
        const T* in = px + (t * heads + h) * dim;
        T* o = py + (t * heads + h) * dim;
        for (int i = 0; i < half; ++i) {
          const T a = in[i], b = in[i + half];
          o[i] = a * c[i] - b * s[i];
          o[i + half] = b * c[i] + a * s[i];
        }
        for (int64_t j = table.rotary_dim; j < dim; ++j) o[j] = in[j];
      }
    }
    out.store();
  });
}

}  // namespace

void rope_forward(const Tensor& x, const Tensor& positions, const RopeTable& table, Tensor& y) {
  rope_apply(x, positions, table, y, 1.0, "rope_forward");
}

void rope_backward(const Tensor& dy, const Tensor& positions, const RopeTable& table, Tensor& dx) {
  // The rotation is orthogonal up to attention_scale, so its transpose is the
  // rotation by the negated angle with the same scale.
  rope_apply(dy, positions, table, dx, -1.0, "rope_backward");
}

}  // namespace amber::cpu
