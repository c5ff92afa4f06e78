// CPU RoPE. Angles are formed in double from integer positions, so long contexts
// keep full precision; a cos/sin table covers the positions present in the batch.
#include "amber/ops/rope.h"

#include <algorithm>
#include <cmath>

#include "amber/ops/cpu/dispatch.h"

namespace amber {

RopeScaling rope_scaling_from_name(const std::string& name) {
  if (name == "none" || name.empty()) return RopeScaling::none;
  if (name == "linear") return RopeScaling::linear;
  if (name == "ntk") return RopeScaling::ntk;
  if (name == "yarn") return RopeScaling::yarn;
  fail("unknown rope scaling '", name, "'; valid: none, linear, ntk, yarn");
}

RopeTable::RopeTable(const RopeConfig& c) : head_dim(c.head_dim) {
  rotary_dim = static_cast<int>(c.head_dim * c.partial);
  AMBER_CHECK(rotary_dim > 0 && rotary_dim % 2 == 0 && rotary_dim <= c.head_dim,
              "rope: rotary dimension ", rotary_dim, " (head_dim ", c.head_dim, " x partial ",
              c.partial, ") must be even, positive and at most head_dim");
  AMBER_CHECK(c.theta > 1.0, "rope: theta must be > 1, got ", c.theta);
  AMBER_CHECK(c.scaling == RopeScaling::none || c.factor >= 1.0,
              "rope: scaling factor must be >= 1, got ", c.factor);
  const int half = rotary_dim / 2;
  const double d = rotary_dim;
  double base = c.theta;
  if (c.scaling == RopeScaling::ntk) base = c.theta * std::pow(c.factor, d / (d - 2.0));
  inv_freq.resize(half);
  for (int i = 0; i < half; ++i) inv_freq[i] = std::pow(base, -2.0 * i / d);
  attention_scale = 1.0;
  if (c.scaling == RopeScaling::linear) {
    for (double& f : inv_freq) f /= c.factor;
  } else if (c.scaling == RopeScaling::yarn) {
    // Dimensions whose wavelength fits many times into the original context keep
    // their frequency (extrapolate); long-wavelength ones are interpolated by
    // `factor`; a linear ramp blends the band between.
    auto correction_dim = [&](double rotations) {
      return d * std::log(c.original_context / (rotations * 2.0 * M_PI)) / (2.0 * std::log(c.theta));
    };
    const double low = std::max(0.0, std::floor(correction_dim(c.beta_fast)));
    double high = std::min(d - 1.0, std::ceil(correction_dim(c.beta_slow)));
    if (high == low) high += 0.001;
    for (int i = 0; i < half; ++i) {
      const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
      const double extrapolate = 1.0 - ramp;
      inv_freq[i] = inv_freq[i] / c.factor * (1.0 - extrapolate) + inv_freq[i] * extrapolate;
    }
    attention_scale = 0.1 * std::log(c.factor) + 1.0;
  }
}

namespace {

// sign = +1 rotates by +angle (forward), -1 by -angle (backward).
void rope_apply(const Tensor& x, const Tensor& positions, const RopeTable& table, Tensor& y,
                double sign, const char* op) {
  cpu::require_cpu(x, op);
  AMBER_CHECK(x.ndim() == 3 && x.size(2) == table.head_dim, op, ": input ", x.shape(),
              " is not [T, H, head_dim=", table.head_dim, "]");
  require_same_shape(x, y, op);
  AMBER_CHECK(positions.dtype() == DType::i32 && positions.numel() == x.size(0), op,
              ": positions must be int32 [", x.size(0), "], got ", positions.shape());
  const int64_t tokens = x.size(0), heads = x.size(1), dim = x.size(2);
  const int half = table.rotary_dim / 2;
  const int32_t* pos = positions.data<int32_t>();
  int32_t max_pos = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    AMBER_CHECK(pos[t] >= 0, op, ": negative position ", pos[t], " at token ", t);
    max_pos = std::max(max_pos, pos[t]);
  }
  cpu::with_compute_type(x.dtype(), [&]<class T>() {
    std::vector<T> cos_t(static_cast<size_t>(max_pos + 1) * half), sin_t(cos_t.size());
#pragma omp parallel for if (max_pos > 1024)
    for (int32_t p = 0; p <= max_pos; ++p)
      for (int i = 0; i < half; ++i) {
        const double angle = p * table.inv_freq[i];
        cos_t[static_cast<size_t>(p) * half + i] = static_cast<T>(std::cos(angle) * table.attention_scale);
        sin_t[static_cast<size_t>(p) * half + i] =
            static_cast<T>(sign * std::sin(angle) * table.attention_scale);
      }
    const Tensor xw = cpu::widened<T>(x);
    cpu::Output<T> out(y);
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

}  // namespace amber
