// CPU RoPE, and QK-norm with RoPE in one pass per head row. Angles are formed in
// double from integer positions, so long contexts keep full precision; a cos/sin table
// covers the positions present in the batch, built once per call.
#include "amber/ops/cpu/rope.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "amber/ops/cpu/dispatch.h"
#include "amber/ops/cpu/norm.h"

namespace amber::cpu {
namespace {

// cos and sign * sin of each position's angles, both times the table's attention scale:
// sign +1 rotates by +angle (forward), -1 by -angle (the transpose).
template <class T>
struct Angles {
  int half, rotary_dim;
  std::vector<T> cos, sin;
  const T* cos_at(int32_t position) const { return cos.data() + static_cast<size_t>(position) * half; }
  const T* sin_at(int32_t position) const { return sin.data() + static_cast<size_t>(position) * half; }
};

template <class T>
Angles<T> angles_of(const Tensor& positions, const RopeTable& table, double sign, const char* op) {
  const int32_t* pos = positions.data<int32_t>();
  int32_t max_pos = 0;
  for (int64_t t = 0; t < positions.numel(); ++t) {
    AMBER_CHECK(pos[t] >= 0, op, ": negative position ", pos[t], " at token ", t);
    max_pos = std::max(max_pos, pos[t]);
  }
  Angles<T> a{table.rotary_dim / 2, table.rotary_dim, {}, {}};
  a.cos.resize(static_cast<size_t>(max_pos + 1) * a.half);
  a.sin.resize(a.cos.size());
#pragma omp parallel for if (a.cos.size() > 4096)
  for (int32_t p = 0; p <= max_pos; ++p)
    for (int i = 0; i < a.half; ++i) {
      const double angle = p * table.inv_freq[i];
      a.cos[static_cast<size_t>(p) * a.half + i] = static_cast<T>(std::cos(angle) * table.attention_scale);
      a.sin[static_cast<size_t>(p) * a.half + i] = static_cast<T>(sign * std::sin(angle) * table.attention_scale);
    }
  return a;
}

// out = the rotation of one head row `in` at `position` (out may be in).
template <class T>
inline void rotate(const Angles<T>& a, int32_t position, const T* in, int64_t dim, T* out) {
  const T *c = a.cos_at(position), *s = a.sin_at(position);
  for (int i = 0; i < a.half; ++i) {
    const T x = in[i], y = in[i + a.half];
    out[i] = x * c[i] - y * s[i];
    out[i + a.half] = y * c[i] + x * s[i];
  }
  for (int64_t j = a.rotary_dim; j < dim; ++j) out[j] = in[j];
}

void rope_apply(const Tensor& x, const Tensor& positions, const RopeTable& table, Tensor& y, double sign,
                const char* op) {
  const int64_t tokens = x.size(0), heads = x.size(1), dim = x.size(2);
  const int32_t* pos = positions.data<int32_t>();
  with_compute_type(x.dtype(), [&]<class T>() {
    const Angles<T> angles = angles_of<T>(positions, table, sign, op);
    const Tensor xw = widened<T>(x);
    Output<T> out(y);
    const T* px = xw.data<T>();
    T* py = out.data();
#pragma omp parallel for if (tokens * heads * dim > 65536)
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t h = 0; h < heads; ++h) rotate(angles, pos[t], px + (t * heads + h) * dim, dim, py + (t * heads + h) * dim);
    out.store();
  });
}

// The head rows [T, H, D] of x in compute type T, read where they lie when x already
// is T with each head's D contiguous (a token-strided view of a stacked projection),
// else from a widened copy.
template <class T>
struct HeadRows {
  Tensor storage;
  int64_t token_stride, heads, dim;
  const T* row(int64_t t, int64_t h) const { return storage.data<T>() + t * token_stride + h * dim; }
};

template <class T>
HeadRows<T> head_rows(const Tensor& x) {
  const bool in_place = x.dtype() == dtype_of<T>() && x.stride(2) == 1 && x.stride(1) == x.size(2);
  const Tensor rows = in_place ? x : widened<T>(x);
  return {rows, rows.stride(0), rows.size(1), rows.size(2)};
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

void qk_norm_rope_forward(const QkNormRopeForward& q, const QkNormRopeForward& k, const Tensor& positions,
                          const RopeTable& table) {
  const int32_t* pos = positions.data<int32_t>();
  with_compute_type(q.x.dtype(), [&]<class T>() {
    const Angles<T> angles = angles_of<T>(positions, table, 1.0, "qk_norm_rope_forward");
    for (const QkNormRopeForward* side : {&q, &k}) {
      const HeadRows<T> x = head_rows<T>(side->x);
      const Tensor weight = side->weight.defined() ? widened<T>(side->weight) : Tensor();
      Tensor y = side->y, rstd = side->rstd;
      Output<T> y_out(y), rstd_out(rstd);
      const T* w = weight.defined() ? weight.data<T>() : nullptr;
      T *py = y_out.data(), *pr = rstd_out.data();
      const int64_t tokens = side->x.size(0), H = x.heads, D = x.dim;
#pragma omp parallel for if (tokens * H * D > 65536)
      for (int64_t t = 0; t < tokens; ++t)
        for (int64_t h = 0; h < H; ++h) {
          const T* in = x.row(t, h);
          T* out = py + (t * H + h) * D;
          const T inv = rms_scale(in, D, side->eps);
          pr[t * H + h] = inv;
          for (int64_t j = 0; j < D; ++j) out[j] = in[j] * inv * (w ? w[j] : T(1));
          rotate(angles, pos[t], out, D, out);
        }
      y_out.store();
      rstd_out.store();
    }
  });
}

void qk_norm_rope_backward(const QkNormRopeBackward& q, const QkNormRopeBackward& k, const Tensor& positions,
                           const RopeTable& table) {
  const int32_t* pos = positions.data<int32_t>();
  with_compute_type(q.x.dtype(), [&]<class T>() {
    const Angles<T> angles = angles_of<T>(positions, table, -1.0, "qk_norm_rope_backward");
    for (const QkNormRopeBackward* side : {&q, &k}) {
      const HeadRows<T> x = head_rows<T>(side->x);
      const Tensor dy = widened<T>(side->dy), rstd = widened<T>(side->rstd);
      const Tensor weight = side->weight.defined() ? widened<T>(side->weight) : Tensor();
      Tensor dx = side->dx;
      Output<T> dx_out(dx);
      const T *pg = dy.data<T>(), *pr = rstd.data<T>(), *w = weight.defined() ? weight.data<T>() : nullptr;
      T* pdx = dx_out.data();
      const int64_t H = x.heads, D = x.dim, rows = side->x.size(0) * H;
      const int64_t blocks = (rows + kRowBlock - 1) / kRowBlock;
      const bool weight_grad = w && side->dweight.defined();
      std::vector<T> partial(weight_grad ? static_cast<size_t>(blocks * D) : 0, T(0));
#pragma omp parallel if (rows * D > 65536)
      {
        std::vector<T> unrotated(D);
#pragma omp for
        for (int64_t b = 0; b < blocks; ++b)
          for (int64_t i = b * kRowBlock; i < std::min(rows, (b + 1) * kRowBlock); ++i) {
            const T* in = x.row(i / H, i % H);
            rotate(angles, pos[i / H], pg + i * D, D, unrotated.data());
            rms_backward_row(unrotated.data(), in, w, pr[i], D, pdx + i * D, false);
            if (weight_grad)
              for (int64_t j = 0; j < D; ++j) partial[b * D + j] += unrotated[j] * in[j] * pr[i];
          }
      }
      dx_out.store();
      if (weight_grad) {
        Tensor dweight = side->dweight;
        Output<T> dw(dweight, true);
        reduce_blocks(partial, blocks, D, dw.data());
        dw.store();
      }
    }
  });
}

}  // namespace amber::cpu
