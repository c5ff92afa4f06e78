// CUDA QK-norm fused with RoPE, q and k in one launch. Each lane holds one 16-byte pack
// of a (token, head) row, so a row takes L = head_dim / pack lanes and a warp 32 / L rows
// at once; a rotation pair (i, i + rotary_dim / 2) lies in two lanes of the row, which
// trade values by one shuffle. A block takes kTokens tokens and forms their cos/sin rows
// once for all heads of q and k (rope_table.cuh, the bits rope_forward uses). The
// forward normalises and rotates without rounding in between; the backward applies the
// transpose rotation, then the norm's backward, writing dx into a token-strided view
// when given one, and reduces dweight through per-block partial sums in a fixed order.
// Shapes the lanes cannot hold run as the two ops per side, one after the other.
#include <initializer_list>
#include <type_traits>
#include <utility>

#include "amber/ops/cuda/norm.h"
#include "amber/ops/cuda/rope.h"
#include "amber/ops/cuda/rope_table.cuh"
#include "amber/ops/cuda/row_pitch.cuh"

namespace amber::cuda {
namespace {

constexpr int kTokens = 8;
constexpr int kWarps = 8;
constexpr int kMaxHeadDim = 256;
// Row groups a warp loads before it reduces them: two 16-byte loads in flight per lane
// (four in the backward) keep enough bytes moving for these short rows.
constexpr int kUnroll = 2;

// Where one lane sits in its row: pack j of L, the columns it rotates with (the
// partner lane's), and the angles of its columns.
template <class T, int L>
struct LaneRole {
  static constexpr int n = Pack<T>::n;
  int j, column, partner, angle;
  bool first_half, rotating;
  __device__ LaneRole(const RopeParams& p) {
    const int lane = threadIdx.x % 32, half_packs = p.half / n;
    j = lane % L;
    column = j * n;
    first_half = j < half_packs;
    rotating = j < 2 * half_packs;
    partner = first_half ? lane + half_packs : lane - half_packs;
    angle = first_half ? column : column - p.half;
  }
};

// Sum over the L lanes of a row (xor butterfly: every lane gets the same bits).
template <int L>
__device__ __forceinline__ float row_sum(float v) {
#pragma unroll
  for (int o = L / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// v rotated by the angles of `role` at one token: out[c] = v[c] cos - v[c + h] sin and
// out[c + h] = v[c + h] cos + v[c] sin. Every lane of the warp must call it (shuffle).
template <class T, int L>
__device__ __forceinline__ void rotate(const LaneRole<T, L>& role, const float* cos_row, const float* sin_row,
                                       float (&v)[Pack<T>::n]) {
  constexpr int n = Pack<T>::n;
  float other[n];
#pragma unroll
  for (int e = 0; e < n; ++e) other[e] = __shfl_sync(0xffffffffu, v[e], role.partner);
  if (!role.rotating) return;
  const float sign = role.first_half ? -1.0f : 1.0f;
#pragma unroll
  for (int e = 0; e < n; ++e) v[e] = v[e] * cos_row[role.angle + e] + sign * other[e] * sin_row[role.angle + e];
}

// Row r of the block's rows (token first + r / heads, head r % heads): its global index.
__device__ __forceinline__ int64_t global_row(int64_t first, int r, int heads) {
  return (first + r / heads) * heads + r % heads;
}

template <class T>
struct ForwardSide {
  const T* x;
  RowPitch xp;
  const T* w;  // null: no gain
  float eps;
  T* y;
  float* rstd;
  int heads;
};

template <class T>
struct BackwardSide {
  const T *dy, *x;
  RowPitch xp;
  const T* w;
  const float* rstd;
  T* dx;
  RowPitch dxp;
  float* dw_partial;  // [blocks, d], or null: no gain or no dweight wanted
  int heads;
};

template <class T, int L>
__device__ __forceinline__ void load_gain(const T* w, const LaneRole<T, L>& role, float (&gain)[Pack<T>::n]) {
  if (w) {
    load_f32<T, Pack<T>::n>(w + role.column, gain);
  } else {
#pragma unroll
    for (int e = 0; e < Pack<T>::n; ++e) gain[e] = 1.0f;
  }
}

// The block's rows of one side. Its loop runs on the warp's first row, so every lane
// takes the same trips (the shuffles need the whole warp); a lane's rows past the end
// only take part.
template <class T, int L>
__device__ void normalise_and_rotate(const ForwardSide<T>& s, const LaneRole<T, L>& role, int64_t first, int count,
                                     const float (&cos_row)[kTokens][kMaxRopeHalf],
                                     const float (&sin_row)[kTokens][kMaxRopeHalf]) {
  constexpr int n = Pack<T>::n, d = L * n, kGroup = 32 / L, kStride = kWarps * kGroup;
  float gain[n];
  load_gain(s.w, role, gain);
  const int rows = count * s.heads, group = threadIdx.x % 32 / L;
  for (int base = threadIdx.x / 32 * kGroup; base < rows; base += kUnroll * kStride) {
    float v[kUnroll][n];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const int r = base + group + k * kStride;
      if (r < rows) {
        load_f32<T, n>(s.x + s.xp.at(global_row(first, r, s.heads), d) + role.column, v[k]);
      } else {
#pragma unroll
        for (int e = 0; e < n; ++e) v[k][e] = 0.0f;
      }
    }
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const int r = base + group + k * kStride;
      float ss = 0.0f;
#pragma unroll
      for (int e = 0; e < n; ++e) ss += v[k][e] * v[k][e];
      const float inv = 1.0f / sqrtf(row_sum<L>(ss) / static_cast<float>(d) + s.eps);
#pragma unroll
      for (int e = 0; e < n; ++e) v[k][e] *= inv * gain[e];
      const int u = r < rows ? r / s.heads : 0;
      rotate(role, cos_row[u], sin_row[u], v[k]);
      if (r < rows) {
        const int64_t row = global_row(first, r, s.heads);
        if (role.j == 0) s.rstd[row] = inv;
        store_f32<T, n>(s.y + row * d + role.column, v[k]);
      }
    }
  }
}

template <class T, int L>
__global__ void __launch_bounds__(32 * kWarps) qk_norm_rope_forward_kernel(const ForwardSide<T> q,
                                                                        const ForwardSide<T> k,
                                                                        const int32_t* positions,
                                                                        const RopeParams p, int64_t tokens) {
  __shared__ float cos_row[kTokens][kMaxRopeHalf], sin_row[kTokens][kMaxRopeHalf];
  const auto [first, count] = rope_rows<kTokens>(p, positions, tokens, cos_row, sin_row);
  const LaneRole<T, L> role(p);
  normalise_and_rotate(q, role, first, count, cos_row, sin_row);
  normalise_and_rotate(k, role, first, count, cos_row, sin_row);
}

// The backward of one side's rows (rotation by the negated sine: the transpose), then
// its dweight partial: dw_partial[block, :] = the block's sum of g * xhat, the row
// groups of a warp added by a fixed butterfly, the warps in warp order.
template <class T, int L>
__device__ void unrotate_and_unnormalise(const BackwardSide<T>& s, const LaneRole<T, L>& role, int64_t first,
                                         int count, const float (&cos_row)[kTokens][kMaxRopeHalf],
                                         const float (&sin_row)[kTokens][kMaxRopeHalf],
                                         float (&warp_dw)[kWarps][kMaxHeadDim]) {
  constexpr int n = Pack<T>::n, d = L * n, kGroup = 32 / L, kStride = kWarps * kGroup;
  float gain[n], acc[n] = {};
  load_gain(s.w, role, gain);
  const int rows = count * s.heads, group = threadIdx.x % 32 / L;
  for (int base = threadIdx.x / 32 * kGroup; base < rows; base += kUnroll * kStride) {
    float g[kUnroll][n], v[kUnroll][n];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const int r = base + group + k * kStride;
      if (r < rows) {
        const int64_t row = global_row(first, r, s.heads);
        load_f32<T, n>(s.dy + row * d + role.column, g[k]);
        load_f32<T, n>(s.x + s.xp.at(row, d) + role.column, v[k]);
      } else {
#pragma unroll
        for (int e = 0; e < n; ++e) g[k][e] = v[k][e] = 0.0f;
      }
    }
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const int r = base + group + k * kStride;
      const int u = r < rows ? r / s.heads : 0;
      rotate(role, cos_row[u], sin_row[u], g[k]);
      const int64_t row = r < rows ? global_row(first, r, s.heads) : 0;
      const float inv = r < rows ? s.rstd[row] : 0.0f;
      float sum_gx = 0.0f;
#pragma unroll
      for (int e = 0; e < n; ++e) {
        v[k][e] *= inv;  // xhat
        sum_gx += g[k][e] * gain[e] * v[k][e];
      }
      const float mgx = row_sum<L>(sum_gx) / static_cast<float>(d);
      float out[n];
#pragma unroll
      for (int e = 0; e < n; ++e) {
        out[e] = inv * (g[k][e] * gain[e] - v[k][e] * mgx);
        acc[e] += g[k][e] * v[k][e];
      }
      if (r < rows) store_f32<T, n>(s.dx + s.dxp.at(row, d) + role.column, out);
    }
  }
  if (!s.dw_partial) return;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int e = 0; e < n; ++e) {
    for (int o = 16; o >= L; o >>= 1) acc[e] += __shfl_xor_sync(0xffffffffu, acc[e], o);
    if (lane < L) warp_dw[warp][role.column + e] = acc[e];
  }
  __syncthreads();
  for (int c = threadIdx.x; c < d; c += blockDim.x) {
    float sum = 0.0f;
    for (int i = 0; i < kWarps; ++i) sum += warp_dw[i][c];
    s.dw_partial[static_cast<int64_t>(blockIdx.x) * d + c] = sum;
  }
  __syncthreads();  // warp_dw is reused by the next side
}

// p carries the negated sine: the transpose rotation.
template <class T, int L>
__global__ void __launch_bounds__(32 * kWarps) qk_norm_rope_backward_kernel(const BackwardSide<T> q,
                                                                         const BackwardSide<T> k,
                                                                         const int32_t* positions,
                                                                         const RopeParams p, int64_t tokens) {
  __shared__ float cos_row[kTokens][kMaxRopeHalf], sin_row[kTokens][kMaxRopeHalf];
  __shared__ float warp_dw[kWarps][kMaxHeadDim];
  const auto [first, count] = rope_rows<kTokens>(p, positions, tokens, cos_row, sin_row);
  const LaneRole<T, L> role(p);
  unrotate_and_unnormalise(q, role, first, count, cos_row, sin_row, warp_dw);
  unrotate_and_unnormalise(k, role, first, count, cos_row, sin_row, warp_dw);
}

// Lanes per row when the fused kernels can hold x's heads, else 0: whole 16-byte packs
// per row (4 to 32 of them, a power of two), rotation pairs of whole packs, and every
// row of every tensor starting on a 16-byte boundary.
int lanes_per_row(const Tensor& x, const RopeTable& table, std::initializer_list<const Tensor*> tensors) {
  const int64_t d = x.size(2), pack = 16 / static_cast<int64_t>(dtype_size(x.dtype()));
  const int64_t lanes = d / pack;
  const bool power_of_two = (lanes & (lanes - 1)) == 0;
  if (d % pack != 0 || d > kMaxHeadDim || lanes < 4 || lanes > 32 || !power_of_two) return 0;
  if ((table.rotary_dim / 2) % pack != 0) return 0;
  for (const Tensor* t : tensors)
    if (t->defined() && (!aligned16(t->raw()) || (t->ndim() == 3 && t->stride(0) % pack != 0))) return 0;
  return static_cast<int>(lanes);
}

template <class Fn>
void with_lanes_per_row(int lanes, Fn&& fn) {
  switch (lanes) {
    case 4: return fn(std::integral_constant<int, 4>{});
    case 8: return fn(std::integral_constant<int, 8>{});
    case 16: return fn(std::integral_constant<int, 16>{});
    default: return fn(std::integral_constant<int, 32>{});
  }
}

void require_same_dtype(const Tensor& t, const Tensor& x, const char* what, const char* op) {
  if (t.defined())
    AMBER_CHECK(t.dtype() == x.dtype(), op, ": ", what, " is ", dtype_name(t.dtype()), " but q is ",
                dtype_name(x.dtype()), "; on the GPU they must match");
}

void require_f32_stat(const Tensor& rstd, const char* op) {
  require_contiguous(rstd, op);
  AMBER_CHECK(rstd.dtype() == DType::f32, op, ": rstd must be f32 on the GPU, got ", dtype_name(rstd.dtype()));
}

unsigned token_blocks(int64_t tokens) { return static_cast<unsigned>((tokens + kTokens - 1) / kTokens); }

template <class T>
const T* data_or_null(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.raw()) : nullptr;
}

template <class T>
ForwardSide<T> forward_side(const QkNormRopeForward& s, const char* what, const char* op) {
  Tensor y = s.y, rstd = s.rstd;
  return {static_cast<const T*>(s.x.raw()), row_pitch(s.x, what, op), data_or_null<T>(s.weight),
          static_cast<float>(s.eps),        static_cast<T*>(y.raw()),   static_cast<float*>(rstd.raw()),
          static_cast<int>(s.x.size(1))};
}

template <class T>
BackwardSide<T> backward_side(const QkNormRopeBackward& s, float* dw_partial, const char* what, const char* op) {
  Tensor dx = s.dx;
  return {static_cast<const T*>(s.dy.raw()),
          static_cast<const T*>(s.x.raw()),
          row_pitch(s.x, what, op),
          data_or_null<T>(s.weight),
          static_cast<const float*>(s.rstd.raw()),
          static_cast<T*>(dx.raw()),
          row_pitch(dx, what, op),
          dw_partial,
          static_cast<int>(s.x.size(1))};
}

}  // namespace

void qk_norm_rope_forward(const QkNormRopeForward& q, const QkNormRopeForward& k, const Tensor& positions,
                          const RopeTable& table) {
  const char* op = "qk_norm_rope_forward";
  const int lanes = lanes_per_row(q.x, table, {&q.x, &q.weight, &q.y});
  if (lanes == 0 || lanes_per_row(k.x, table, {&k.x, &k.weight, &k.y}) != lanes || k.x.dtype() != q.x.dtype()) {
    for (const QkNormRopeForward* s : {&q, &k}) {
      Tensor y = s->y, rstd = s->rstd;
      cuda::rmsnorm_forward(s->x, s->weight, s->eps, y, rstd, {});
      cuda::rope_forward(y, positions, table, y);
    }
    return;
  }
  for (const QkNormRopeForward* s : {&q, &k}) {
    for (const Tensor* t : {&s->weight, &s->y}) {
      if (t->defined()) require_contiguous(*t, op);
      require_same_dtype(*t, q.x, "a weight or output", op);
    }
    require_f32_stat(s->rstd, op);
  }
  require_contiguous(positions, op);
  const int64_t tokens = q.x.size(0);
  if (tokens == 0) return;
  const RopeParams p = rope_params(table, 1.0, op);
  with_element_type(q.x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    with_lanes_per_row(lanes, [&](auto lanes_tag) {
      qk_norm_rope_forward_kernel<T, decltype(lanes_tag)::value>
          <<<token_blocks(tokens), 32 * kWarps, 0, cudaStreamPerThread>>>(
              forward_side<T>(q, "q", op), forward_side<T>(k, "k", op), static_cast<const int32_t*>(positions.raw()),
              p, tokens);
    });
  });
  check_launch(op, q.x.shape());
}

void qk_norm_rope_backward(const QkNormRopeBackward& q, const QkNormRopeBackward& k, const Tensor& positions,
                           const RopeTable& table) {
  const char* op = "qk_norm_rope_backward";
  const int lanes = lanes_per_row(q.x, table, {&q.dy, &q.x, &q.weight, &q.dx});
  if (lanes == 0 || lanes_per_row(k.x, table, {&k.dy, &k.x, &k.weight, &k.dx}) != lanes ||
      k.x.dtype() != q.x.dtype()) {
    for (const QkNormRopeBackward* s : {&q, &k}) {
      Tensor unrotated = Tensor::empty(s->dy.shape(), s->dy.dtype(), s->dy.device());
      Tensor dx = s->dx, dweight = s->dweight;
      cuda::rope_backward(s->dy, positions, table, unrotated);
      cuda::rmsnorm_backward(unrotated, s->x, s->weight, s->rstd, dx, dweight, false);
    }
    return;
  }
  for (const QkNormRopeBackward* s : {&q, &k}) {
    for (const Tensor* t : {&s->dy, &s->weight}) {
      if (t->defined()) require_contiguous(*t, op);
      require_same_dtype(*t, q.x, "a gradient or weight", op);
    }
    require_same_dtype(s->dx, q.x, "an input gradient", op);
    require_f32_stat(s->rstd, op);
  }
  require_contiguous(positions, op);
  const int64_t tokens = q.x.size(0), d = q.x.size(2);
  if (tokens == 0) return;
  const auto partials = [&](const QkNormRopeBackward& s) {
    return s.weight.defined() && s.dweight.defined() ? Tensor::empty({token_blocks(tokens), d}, DType::f32, s.x.device())
                                                     : Tensor();
  };
  Tensor q_partial = partials(q), k_partial = partials(k);
  const auto partial_data = [](Tensor& t) { return t.defined() ? static_cast<float*>(t.raw()) : nullptr; };
  const RopeParams p = rope_params(table, -1.0, op);
  with_element_type(q.x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    with_lanes_per_row(lanes, [&](auto lanes_tag) {
      qk_norm_rope_backward_kernel<T, decltype(lanes_tag)::value>
          <<<token_blocks(tokens), 32 * kWarps, 0, cudaStreamPerThread>>>(
              backward_side<T>(q, partial_data(q_partial), "q", op),
              backward_side<T>(k, partial_data(k_partial), "k", op), static_cast<const int32_t*>(positions.raw()), p,
              tokens);
    });
  });
  check_launch(op, q.x.shape());
  for (const auto& [side, partial] : {std::pair{&q, &q_partial}, std::pair{&k, &k_partial}}) {
    if (!partial->defined()) continue;
    Tensor dweight = side->dweight;
    add_column_sums(*partial, dweight, op);
  }
}

}  // namespace amber::cuda
