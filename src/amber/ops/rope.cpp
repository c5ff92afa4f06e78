// Entry points of ops/rope.h: the frequency table (shared by both devices), shared
// validation, then the device switch.
#include "amber/ops/rope.h"

#include <algorithm>
#include <cmath>

#include "amber/ops/cpu/rope.h"
#include "amber/ops/cuda/rope/rope.h"
#include "amber/ops/device_switch.h"

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

void check_rope(const Tensor& x, const Tensor& positions, const RopeTable& table, const Tensor& y,
                const char* op) {
  AMBER_CHECK(x.ndim() == 3 && x.size(2) == table.head_dim, op, ": input ", x.shape(),
              " is not [T, H, head_dim=", table.head_dim, "]");
  require_same_shape(x, y, op);
  AMBER_CHECK(positions.dtype() == DType::i32 && positions.numel() == x.size(0), op,
              ": positions must be int32 [", x.size(0), "], got ", positions.shape());
}

void check_shared_dtype(const Tensor& q, const Tensor& k, const char* op) {
  AMBER_CHECK(q.dtype() == k.dtype(), op, ": q is ", dtype_name(q.dtype()), " and k ", dtype_name(k.dtype()),
              "; they must share a dtype");
}

}  // namespace

void rope_forward(const Tensor& x, const Tensor& positions, const RopeTable& table, Tensor& y) {
  const char* op = "rope_forward";
  check_rope(x, positions, table, y, op);
  AMBER_ON_DEVICE(ops::common_device(op, {&x, &positions, &y}), op,
                  cuda::rope_forward(x, positions, table, y), cpu::rope_forward(x, positions, table, y));
}

void rope_backward(const Tensor& dy, const Tensor& positions, const RopeTable& table, Tensor& dx) {
  const char* op = "rope_backward";
  check_rope(dy, positions, table, dx, op);
  AMBER_ON_DEVICE(ops::common_device(op, {&dy, &positions, &dx}), op,
                  cuda::rope_backward(dy, positions, table, dx),
                  cpu::rope_backward(dy, positions, table, dx));
}

void qk_norm_rope_forward(const QkNormRopeForward& q, const QkNormRopeForward& k, const Tensor& positions,
                          const RopeTable& table) {
  const char* op = "qk_norm_rope_forward";
  check_shared_dtype(q.x, k.x, op);
  for (const QkNormRopeForward* s : {&q, &k}) {
    check_rope(s->x, positions, table, s->y, op);
    AMBER_CHECK(s->rstd.numel() == s->x.size(0) * s->x.size(1), op, ": rstd needs ", s->x.size(0) * s->x.size(1),
                " elements, has ", s->rstd.numel());
  }
  const Device device = ops::common_device(op, {&q.x, &q.weight, &q.y, &q.rstd, &k.x, &k.weight, &k.y, &k.rstd,
                                                &positions});
  AMBER_ON_DEVICE(device, op, cuda::qk_norm_rope_forward(q, k, positions, table),
                  cpu::qk_norm_rope_forward(q, k, positions, table));
}

Device check_qk_norm_rope_backward(const QkNormRopeBackward& q, const QkNormRopeBackward& k,
                                   const Tensor& positions, const RopeTable& table, const char* op) {
  check_shared_dtype(q.x, k.x, op);
  for (const QkNormRopeBackward* s : {&q, &k}) {
    check_rope(s->x, positions, table, s->dy, op);
    require_same_shape(s->x, s->dx, op);
    AMBER_CHECK(s->rstd.numel() == s->x.size(0) * s->x.size(1), op, ": rstd needs ", s->x.size(0) * s->x.size(1),
                " elements, has ", s->rstd.numel());
  }
  return ops::common_device(op, {&q.dy, &q.x, &q.weight, &q.rstd, &q.dx, &q.dweight, &k.dy, &k.x, &k.weight, &k.rstd,
                                 &k.dx, &k.dweight, &positions});
}

void qk_norm_rope_backward(const QkNormRopeBackward& q, const QkNormRopeBackward& k, const Tensor& positions,
                           const RopeTable& table) {
  const char* op = "qk_norm_rope_backward";
  const Device device = check_qk_norm_rope_backward(q, k, positions, table, op);
  AMBER_ON_DEVICE(device, op, cuda::qk_norm_rope_backward(q, k, positions, table),
                  cpu::qk_norm_rope_backward(q, k, positions, table));
}

}  // namespace amber
