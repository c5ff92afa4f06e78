// CUDA QK-norm fused with RoPE, q and k in one launch. Each lane holds two 16-byte packs
// of a (token, head) row: columns i.. and i + rotary_dim / 2.. of one rotation pair where
// it rotates, two adjacent packs past the rotary columns. A rotation is then the lane's
// own arithmetic (no shuffle), a row takes L = head_dim / (2 packs) lanes and a warp
// 32 / L rows at once. At a token's first rows a warp forms the token's cos/sin row in
// its own shared memory (rope_table.cuh's bits, the ones rope_forward uses).
// The forward takes one token a warp: it issues the loads of all the token's rows of q
// and k, then forms the angles while they arrive, normalises and rotates without
// rounding in between. The backward runs one wave of blocks whose warps walk tokens a
// grid's warps apart, 32 / L rows (a unit) at a time, the next two units' dy, x, rstd
// and position on their way by cp.async into the warp's ring in shared memory while it
// works on one; it applies the transpose rotation, then the norm's backward, writes dx
// into a token-strided view when given one, and reduces dweight through per-block
// partial sums (one a block of the wave) in a fixed order. No warp waits on another
// (the backward's warps meet once, at the end, for the weight partials). Inside the
// Hopper attention's backward, q's dy is read from the attention's f32 sum of dQ
// (ordered_sum.cuh) instead of a bf16 dq. Shapes the lanes cannot hold run as the two
// ops per side, one after the other.
#include <algorithm>
#include <initializer_list>
#include <type_traits>
#include <utility>

#include "amber/core/stream.h"
#include "amber/ops/cuda/common/async_copy.cuh"
#include "amber/ops/cuda/common/ordered_sum.cuh"
#include "amber/ops/cuda/common/row_pitch.cuh"
#include "amber/ops/cuda/norm/norm.h"
#include "amber/ops/cuda/rope/rope.h"
#include "amber/ops/cuda/rope/rope_table.cuh"

namespace amber::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kMaxHeadDim = 256;
// The forward takes a token a warp and loads its rows in passes of kForwardSlots units
// (Kohaku's 14 to 28 rows of heads of 64 in bf16: one pass), three blocks an SM; the
// backward holds two tensors' pieces and the weights' sums, two blocks an SM.
constexpr int kForwardSlots = 4;
template <bool kBackward>
constexpr int kBlocksPerSm = kBackward ? 2 : 3;

// Where one lane sits in its row: its packs start at columns `first` and `second`; a
// rotating lane's are the rotation pairs of the angles from `angle`, the others pass
// through.
template <class T, int L>
struct LaneRole {
  static constexpr int n = Pack<T>::n;
  int first, second, angle;
  bool rotating;
  __device__ LaneRole(const RopeParams& p) {
    const int j = threadIdx.x % 32 % L, half_packs = p.half / n;
    rotating = j < half_packs;
    angle = j * n;
    first = rotating ? angle : p.rotary_dim + 2 * n * (j - half_packs);
    second = rotating ? first + p.half : first + n;
  }
};

// Sum over the L lanes of a row (xor butterfly: every lane gets the same bits).
template <int L>
__device__ __forceinline__ float row_sum(float v) {
#pragma unroll
  for (int o = L / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The lane's two packs rotated by its angles at one token: a[e] = a[e] cos - b[e] sin,
// b[e] = b[e] cos + a[e] sin. cos_row and sin_row are the warp's rows in shared memory,
// 16-byte aligned, so a lane reads its n angles four at a time.
template <class T, int L>
__device__ __forceinline__ void rotate(const LaneRole<T, L>& role, const float* cos_row, const float* sin_row,
                                       float (&a)[Pack<T>::n], float (&b)[Pack<T>::n]) {
  constexpr int n = Pack<T>::n;
  static_assert(n % 4 == 0, "a lane's angles are read as float4");
  if (!role.rotating) return;
  const float4* c4 = reinterpret_cast<const float4*>(cos_row + role.angle);
  const float4* s4 = reinterpret_cast<const float4*>(sin_row + role.angle);
#pragma unroll
  for (int e = 0; e < n; e += 4) {
    const float4 c = c4[e / 4], s = s4[e / 4];
    const float cs[4] = {c.x, c.y, c.z, c.w}, sn[4] = {s.x, s.y, s.z, s.w};
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const float x = a[e + u], y = b[e + u];
      a[e + u] = x * cs[u] - y * sn[u];
      b[e + u] = y * cs[u] + x * sn[u];
    }
  }
}

// x (and the backward's dx) are [T, heads, d] with rows contiguous and tokens
// `stride` elements apart (a contiguous tensor or the heads of a stacked projection);
// y, dy and the statistics are contiguous.
template <class T>
struct ForwardSide {
  const T* x;
  int64_t x_stride;
  const T* w;  // null: no gain
  float eps;
  T* y;
  float* rstd;
  int heads;
};

template <class T>
struct BackwardSide {
  const T *dy, *x;
  OrderedSum dy_sum;  // when its sum is set, dy's source instead of dy
  int64_t x_stride;
  const T* w;
  const float* rstd;
  T* dx;
  int64_t dx_stride;
  float* dw_partial;  // [blocks, d], or null: no gain or no dweight wanted
  int heads;
};

template <class T>
__device__ __forceinline__ void unpack(const uint4& raw, float (&out)[Pack<T>::n]) {
  const Pack<T> a = *reinterpret_cast<const Pack<T>*>(&raw);
#pragma unroll
  for (int e = 0; e < Pack<T>::n; ++e) out[e] = to_f32(a.v[e]);
}

// A lane's two packs of one row (or of the gain), as loaded.
struct RowPacks {
  uint4 a, b;
};

template <class T, int L>
__device__ __forceinline__ RowPacks load_packs(const T* row, const LaneRole<T, L>& role) {
  return {*reinterpret_cast<const uint4*>(row + role.first), *reinterpret_cast<const uint4*>(row + role.second)};
}

template <class T, int L>
__device__ __forceinline__ void store_packs(T* row, const LaneRole<T, L>& role, const float (&a)[Pack<T>::n],
                                            const float (&b)[Pack<T>::n]) {
  store_f32<T, Pack<T>::n>(row + role.first, a);
  store_f32<T, Pack<T>::n>(row + role.second, b);
}

// The norm's gain at the lane's columns (ones without a gain); read per row from L1,
// which keeps the registers for rows in flight.
template <class T, int L>
__device__ __forceinline__ void load_gain(const T* w, const LaneRole<T, L>& role, float (&a)[Pack<T>::n],
                                          float (&b)[Pack<T>::n]) {
  if (w) {
    const RowPacks g = load_packs(w, role);
    unpack<T>(g.a, a);
    unpack<T>(g.b, b);
  } else {
#pragma unroll
    for (int e = 0; e < Pack<T>::n; ++e) a[e] = b[e] = 1.0f;
  }
}

// Row `index` of a token's q and k rows: which side and head; rows past the token's
// are dead (head 0) and only take part in the shuffles.
struct TokenRow {
  bool q, live;
  int head;
  __device__ TokenRow(int index, int q_heads, int rows)
      : q(index < q_heads), live(index < rows), head(live ? (q ? index : index - q_heads) : 0) {}
};

// The forward's token (one a warp) as K slots a pass: slot s of the pass from `base` is
// row base + s * (32 / L) + the lane's row group. A slot wholly past the token's rows is
// the same for every lane, so the whole warp skips it.
template <int L, int K>
struct TokenSlots {
  static constexpr int kGroups = 32 / L;
  int q_heads, rows, group;
  __device__ TokenSlots(int q_heads, int k_heads) : q_heads(q_heads), rows(q_heads + k_heads),
                                                    group(threadIdx.x % 32 / L) {}
  __device__ bool past(int base, int s) const { return base + s * kGroups >= rows; }
  __device__ TokenRow row(int base, int s) const { return TokenRow(base + s * kGroups + group, q_heads, rows); }
  // f(s, row s) for the slots of the pass from `base`, unrolled (so f indexes its
  // per-slot arrays with constants), stopping at the first slot past the token's rows.
  template <class F>
  __device__ __forceinline__ void each(int base, const F& f) const {
#pragma unroll
    for (int s = 0; s < K; ++s) {
      if (past(base, s)) break;
      f(s, row(base, s));
    }
  }
};

// Unit u of a backward warp's work: its token, its rows (one per group of L lanes) and
// whether it is the token's first.
struct Unit {
  int64_t token;
  TokenRow row;
  bool first;
};

// A backward warp's work: the tokens warp, warp + warps, ... of the grid, each as
// units of 32 / L rows (q's rows first, then k's).
template <int L>
struct WarpUnits {
  static constexpr int kGroups = 32 / L;
  int q_heads, rows, per_token, group, count;
  int64_t first, step;
  __device__ WarpUnits(int q_heads, int k_heads, int64_t tokens)
      : q_heads(q_heads),
        rows(q_heads + k_heads),
        per_token((rows + kGroups - 1) / kGroups),
        group(threadIdx.x % 32 / L),
        first(static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32),
        step(static_cast<int64_t>(gridDim.x) * kWarps) {
    count = first < tokens ? static_cast<int>((tokens - first + step - 1) / step) * per_token : 0;
  }
  __device__ Unit at(int u) const {
    const int of_token = u / per_token, index = (u - of_token * per_token) * kGroups + group;
    return {first + of_token * step, TokenRow(index, q_heads, rows), index < kGroups};
  }
};

// The backward's units arrive by cp.async kAhead units before they are worked on, into
// the warp's ring of kStages in shared memory: per stage the lane's two pieces of dy's
// and of x's row, its row's rstd and its token's position. A lane copies and reads back
// only its own slots, so no barrier guards them. With kSums a row's dy may come from an
// ordered f32 sum: a piece of 8 columns is then 32 bytes, its second 16 in slot 2.
constexpr int kAhead = 2, kStages = kAhead + 1;
constexpr int kDy = 0, kX = 1, kDySumTail = 2;

template <bool kSums>
struct alignas(16) WarpRing {
  uint4 pieces[kStages][kSums ? 3 : 2][2][32];  // [stage][kDy, kX (, kDySumTail)][piece][lane]
  float stat[kStages][32];
  int32_t position[kStages][32];
};

// Each warp's cos and sin rows, 16-byte aligned for rotate's float4 reads.
struct alignas(16) WarpAngles {
  float cos_row[kMaxHeadDim / 2], sin_row[kMaxHeadDim / 2];
};

// The backward block's shared memory: the warps' rings, angle rows and weight sums.
template <bool kSums>
struct alignas(16) BackwardShared {
  WarpRing<kSums> ring[kWarps];
  WarpAngles angles[kWarps];
  float warp_dw[kWarps][kMaxHeadDim];
};

template <class T, int L, bool kSums>
__device__ __forceinline__ void copy_pieces(WarpRing<kSums>& ring, int stage, int tensor, const T* row,
                                            const LaneRole<T, L>& role, bool live) {
  const int lane = threadIdx.x % 32;
  cp_async_16(&ring.pieces[stage][tensor][0][lane], row + role.first, live);
  cp_async_16(&ring.pieces[stage][tensor][1][lane], row + role.second, live);
}

template <class T, bool kSums>
__device__ __forceinline__ void read_pieces(const WarpRing<kSums>& ring, int stage, int tensor,
                                            float (&a)[Pack<T>::n], float (&b)[Pack<T>::n]) {
  const int lane = threadIdx.x % 32;
  unpack<T>(ring.pieces[stage][tensor][0][lane], a);
  unpack<T>(ring.pieces[stage][tensor][1][lane], b);
}

// dy's row of token `token` from an ordered sum: a piece's 8 columns start on a multiple
// of 8, so after sum_column's permutation (whole even/odd chunk pairs) they are still 32
// contiguous bytes.
template <class T, int L>
__device__ __forceinline__ void copy_sum_pieces(WarpRing<true>& ring, int stage, const float* row, int64_t token,
                                                const LaneRole<T, L>& role, bool live) {
  const int lane = threadIdx.x % 32;
  const float* a = row + sum_column(token, role.first);
  const float* b = row + sum_column(token, role.second);
  cp_async_16(&ring.pieces[stage][kDy][0][lane], a, live);
  cp_async_16(&ring.pieces[stage][kDySumTail][0][lane], a + 4, live);
  cp_async_16(&ring.pieces[stage][kDy][1][lane], b, live);
  cp_async_16(&ring.pieces[stage][kDySumTail][1][lane], b + 4, live);
}

__device__ __forceinline__ void read_sum_pieces(const WarpRing<true>& ring, int stage, float scale, float (&a)[8],
                                                float (&b)[8]) {
  const int lane = threadIdx.x % 32;
  const auto read = [&](int piece, float(&out)[8]) {
    const float4 head = reinterpret_cast<const float4&>(ring.pieces[stage][kDy][piece][lane]);
    const float4 tail = reinterpret_cast<const float4&>(ring.pieces[stage][kDySumTail][piece][lane]);
    const float v[8] = {head.x, head.y, head.z, head.w, tail.x, tail.y, tail.z, tail.w};
#pragma unroll
    for (int e = 0; e < 8; ++e) out[e] = scale * v[e];
  };
  read(0, a);
  read(1, b);
}

// The token's cos/sin row in the warp's shared memory: lanes take the angles lane,
// lane + 32, ... (no other warp reads them, so warp barriers suffice: before, for the
// last token's readers).
__device__ __forceinline__ void form_angles(const RopeParams& p, int32_t pos, int64_t token, WarpAngles& a) {
  __syncwarp();
  for (int i = threadIdx.x % 32; i < p.half; i += 32) {
    const float2 c = rope_angle(p, pos, i, token);
    a.cos_row[i] = c.x;
    a.sin_row[i] = c.y;
  }
  __syncwarp();
}

// Runs a warp's units: copies unit u + kAhead while it works on unit u, which
// work(unit, stage) reads from the ring.
template <int L, bool kSums, class Copy, class Work>
__device__ __forceinline__ void run_units(const WarpUnits<L>& units, WarpRing<kSums>& ring, const int32_t* positions,
                                          const Copy& copy, const Work& work) {
  const auto issue = [&](int u) {
    if (u < units.count) {
      const int stage = u % kStages;
      const Unit unit = units.at(u);
      copy(unit, stage);
      if (unit.first) cp_async_4(&ring.position[stage][threadIdx.x % 32], positions + unit.token, true);
    }
    cp_async_commit();  // empty past the last unit, so every wait counts alike
  };
  for (int u = 0; u < kAhead; ++u) issue(u);
  for (int u = 0; u < units.count; ++u) {
    issue(u + kAhead);
    cp_async_wait<kAhead>();
    work(units.at(u), u % kStages);
  }
}

template <class T, int L>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm<false>)
    qk_norm_rope_forward_kernel(const __grid_constant__ ForwardSide<T> q, const __grid_constant__ ForwardSide<T> k,
                                const int32_t* positions, const __grid_constant__ RopeParams p, int64_t tokens) {
  constexpr int n = Pack<T>::n, d = 2 * L * n, K = kForwardSlots;
  __shared__ WarpAngles angles[kWarps];
  const int64_t token = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (token >= tokens) return;
  WarpAngles& a = angles[threadIdx.x / 32];
  const LaneRole<T, L> role(p);
  const TokenSlots<L, K> slots(q.heads, k.heads);
  for (int base = 0; base < slots.rows; base += K * slots.kGroups) {
    RowPacks raw[K];
    slots.each(base, [&](int s, const TokenRow& r) {
      const ForwardSide<T>& side = r.q ? q : k;
      raw[s] = r.live ? load_packs(side.x + token * side.x_stride + r.head * d, role) : RowPacks{};
    });
    if (base == 0) form_angles(p, positions[token], token, a);
    slots.each(base, [&](int s, const TokenRow& r) {
      const ForwardSide<T>& side = r.q ? q : k;
      float va[n], vb[n], ga[n], gb[n];
      unpack<T>(raw[s].a, va);
      unpack<T>(raw[s].b, vb);
      float ss = 0.0f;
#pragma unroll
      for (int e = 0; e < n; ++e) ss += va[e] * va[e] + vb[e] * vb[e];
      // d is a power of two, so the mean's scale is exact.
      const float inv = rsqrtf(row_sum<L>(ss) * (1.0f / d) + side.eps);
      load_gain(side.w, role, ga, gb);
#pragma unroll
      for (int e = 0; e < n; ++e) {
        va[e] *= inv * ga[e];
        vb[e] *= inv * gb[e];
      }
      rotate(role, a.cos_row, a.sin_row, va, vb);
      if (r.live) {
        const int64_t row = token * side.heads + r.head;
        if (threadIdx.x % L == 0) side.rstd[row] = inv;
        store_packs(side.y + row * d, role, va, vb);
      }
    });
  }
}

// dw_partial[block, :] = the block's sum of g * xhat over one side's rows: each lane's
// sums, the row groups of a warp added by a fixed butterfly, the warps in warp order.
template <class T, int L>
__device__ void store_weight_partial(const LaneRole<T, L>& role, float (&acc_a)[Pack<T>::n],
                                     float (&acc_b)[Pack<T>::n], float* dw_partial,
                                     float (&warp_dw)[kWarps][kMaxHeadDim]) {
  constexpr int n = Pack<T>::n, d = 2 * L * n;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int e = 0; e < n; ++e) {
    for (int o = 16; o >= L; o >>= 1) {
      acc_a[e] += __shfl_xor_sync(0xffffffffu, acc_a[e], o);
      acc_b[e] += __shfl_xor_sync(0xffffffffu, acc_b[e], o);
    }
    if (lane < L) {
      warp_dw[warp][role.first + e] = acc_a[e];
      warp_dw[warp][role.second + e] = acc_b[e];
    }
  }
  __syncthreads();
  for (int c = threadIdx.x; c < d; c += blockDim.x) {
    float sum = 0.0f;
    for (int i = 0; i < kWarps; ++i) sum += warp_dw[i][c];
    dw_partial[static_cast<int64_t>(blockIdx.x) * d + c] = sum;
  }
  __syncthreads();  // warp_dw is reused by the next side
}

// The transpose rotation (p carries the negated sine), then the norm's backward, per
// row; the weights' partial sums per side over all of the block's rows. kSums: a side
// may read dy from an ordered f32 sum (2-byte T only: 8 columns a piece).
template <class T, int L, bool kSums>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm<true>)
    qk_norm_rope_backward_kernel(const __grid_constant__ BackwardSide<T> q, const __grid_constant__ BackwardSide<T> k,
                                 const int32_t* positions, const __grid_constant__ RopeParams p, int64_t tokens) {
  constexpr int n = Pack<T>::n, d = 2 * L * n;
  static_assert(!kSums || n == 8, "an ordered sum's pieces are 8 columns");
  extern __shared__ uint4 shared_words[];
  BackwardShared<kSums>& shared = *reinterpret_cast<BackwardShared<kSums>*>(shared_words);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  WarpRing<kSums>& ring = shared.ring[warp];
  WarpAngles& a = shared.angles[warp];
  const LaneRole<T, L> role(p);
  const WarpUnits<L> units(q.heads, k.heads, tokens);
  float acc_qa[n] = {}, acc_qb[n] = {}, acc_ka[n] = {}, acc_kb[n] = {};
  const auto copy = [&](const Unit& u, int stage) {
    const BackwardSide<T>& side = u.row.q ? q : k;
    const int64_t row = u.token * side.heads + u.row.head;
    bool from_sum = false;
    if constexpr (kSums) {
      from_sum = side.dy_sum.sum != nullptr;
      if (from_sum)
        copy_sum_pieces(ring, stage, side.dy_sum.sum + (u.row.head * tokens + u.token) * d, u.token, role,
                        u.row.live);
    }
    if (!from_sum) copy_pieces(ring, stage, kDy, side.dy + row * d, role, u.row.live);
    copy_pieces(ring, stage, kX, side.x + u.token * side.x_stride + u.row.head * d, role, u.row.live);
    cp_async_4(&ring.stat[stage][lane], side.rstd + row, u.row.live);
  };
  const auto work = [&](const Unit& u, int stage) {
    const BackwardSide<T>& side = u.row.q ? q : k;
    float ga[n], gb[n], xa[n], xb[n], wa[n], wb[n];
    bool from_sum = false;
    if constexpr (kSums) {
      from_sum = side.dy_sum.sum != nullptr;
      if (from_sum) read_sum_pieces(ring, stage, side.dy_sum.scale, ga, gb);
    }
    if (!from_sum) read_pieces<T>(ring, stage, kDy, ga, gb);
    read_pieces<T>(ring, stage, kX, xa, xb);
    const float inv = ring.stat[stage][lane];
    if (u.first) form_angles(p, ring.position[stage][lane], u.token, a);
    rotate(role, a.cos_row, a.sin_row, ga, gb);
    load_gain(side.w, role, wa, wb);
    float sum_gx = 0.0f;
#pragma unroll
    for (int e = 0; e < n; ++e) {
      xa[e] *= inv;  // xhat
      xb[e] *= inv;
      sum_gx += ga[e] * wa[e] * xa[e] + gb[e] * wb[e] * xb[e];
    }
    const float mgx = row_sum<L>(sum_gx) * (1.0f / d);
    // Dead rows add zeros; a row's g * xhat goes to its own side's sums.
    const float to_q = u.row.q ? 1.0f : 0.0f, to_k = 1.0f - to_q;
#pragma unroll
    for (int e = 0; e < n; ++e) {
      const float gxa = ga[e] * xa[e], gxb = gb[e] * xb[e];
      acc_qa[e] = fmaf(to_q, gxa, acc_qa[e]);
      acc_qb[e] = fmaf(to_q, gxb, acc_qb[e]);
      acc_ka[e] = fmaf(to_k, gxa, acc_ka[e]);
      acc_kb[e] = fmaf(to_k, gxb, acc_kb[e]);
      ga[e] = inv * (ga[e] * wa[e] - xa[e] * mgx);
      gb[e] = inv * (gb[e] * wb[e] - xb[e] * mgx);
    }
    if (u.row.live) store_packs(side.dx + u.token * side.dx_stride + u.row.head * d, role, ga, gb);
  };
  run_units(units, ring, positions, copy, work);
  if (q.dw_partial) store_weight_partial(role, acc_qa, acc_qb, q.dw_partial, shared.warp_dw);
  if (k.dw_partial) store_weight_partial(role, acc_ka, acc_kb, k.dw_partial, shared.warp_dw);
}

// A one-wave grid of the kernel (as many blocks as are resident at once, at most a
// warp per token): warps walk tokens a grid's warps apart, so a block's weight
// partials cover many tokens. The grid depends on the shape, the kernel and the device
// only, so the partial sums (and the gradient bits) are the same on every run.
template <class Kernel>
unsigned wave_blocks(Kernel kernel, size_t smem, int64_t tokens, const char* op) {
  allow_smem(reinterpret_cast<const void*>(kernel), smem, op);
  return static_cast<unsigned>(std::min(resident_blocks(kernel, kThreads, smem), (tokens + kWarps - 1) / kWarps));
}

// Lanes per row when the fused kernels can hold x's heads, else 0: two whole 16-byte
// packs a lane (2 to 32 lanes a row, a power of two), rotation pairs of whole packs, and
// every row of every tensor starting on a 16-byte boundary.
int lanes_per_row(const Tensor& x, const RopeTable& table, std::initializer_list<const Tensor*> tensors) {
  const int64_t d = x.size(2), pack = 16 / static_cast<int64_t>(dtype_size(x.dtype()));
  const int64_t lanes = d / (2 * pack);
  const bool power_of_two = (lanes & (lanes - 1)) == 0;
  if (d % (2 * pack) != 0 || d > kMaxHeadDim || lanes < 2 || lanes > 32 || !power_of_two) return 0;
  if ((table.rotary_dim / 2) % pack != 0) return 0;
  for (const Tensor* t : tensors)
    if (t->defined() && (!aligned16(t->raw()) || (t->ndim() == 3 && t->stride(0) % pack != 0))) return 0;
  return static_cast<int>(lanes);
}

template <class Fn>
void with_lanes_per_row(int lanes, Fn&& fn) {
  switch (lanes) {
    case 2: return fn(std::integral_constant<int, 2>{});
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

template <class T>
const T* data_or_null(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.raw()) : nullptr;
}

// Elements between x's tokens: a [T, H, D] tensor whose rows are contiguous (checked by
// row_pitch, which names what is wrong).
int64_t token_stride(const Tensor& x, const char* what, const char* op) {
  row_pitch(x, what, op);
  return x.stride(0);
}

template <class T>
ForwardSide<T> forward_side(const QkNormRopeForward& s, const char* what, const char* op) {
  Tensor y = s.y, rstd = s.rstd;
  return {static_cast<const T*>(s.x.raw()), token_stride(s.x, what, op), data_or_null<T>(s.weight),
          static_cast<float>(s.eps),        static_cast<T*>(y.raw()),       static_cast<float*>(rstd.raw()),
          static_cast<int>(s.x.size(1))};
}

template <class T>
BackwardSide<T> backward_side(const QkNormRopeBackward& s, const OrderedSum* dy_sum, float* dw_partial,
                              const char* what, const char* op) {
  Tensor dx = s.dx;
  return {data_or_null<T>(s.dy),
          static_cast<const T*>(s.x.raw()),
          dy_sum ? *dy_sum : OrderedSum{},
          token_stride(s.x, what, op),
          data_or_null<T>(s.weight),
          static_cast<const float*>(s.rstd.raw()),
          static_cast<T*>(dx.raw()),
          token_stride(dx, what, op),
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
          <<<static_cast<unsigned>((tokens + kWarps - 1) / kWarps), kThreads, 0, current_stream()>>>(
              forward_side<T>(q, "q", op), forward_side<T>(k, "k", op), static_cast<const int32_t*>(positions.raw()),
              p, tokens);
    });
  });
  check_launch(op, q.x.shape());
}

namespace {

// The fused backward's lanes per row for both sides, or 0 when it cannot hold them.
int backward_lanes(const QkNormRopeBackward& q, const QkNormRopeBackward& k, const RopeTable& table) {
  const int lanes = lanes_per_row(q.x, table, {&q.dy, &q.x, &q.weight, &q.dx});
  const bool both = lanes != 0 && lanes_per_row(k.x, table, {&k.dy, &k.x, &k.weight, &k.dx}) == lanes &&
                    k.x.dtype() == q.x.dtype();
  return both ? lanes : 0;
}

}  // namespace

bool qk_norm_rope_backward_fuses(const QkNormRopeBackward& q, const QkNormRopeBackward& k, const RopeTable& table) {
  return backward_lanes(q, k, table) != 0;
}

void qk_norm_rope_backward(const QkNormRopeBackward& q, const QkNormRopeBackward& k, const Tensor& positions,
                           const RopeTable& table, const OrderedSum* q_dy_sum) {
  const char* op = "qk_norm_rope_backward";
  const int lanes = backward_lanes(q, k, table);
  if (lanes == 0) {
    AMBER_CHECK(!q_dy_sum, op, ": q's gradient as an ordered sum needs the fused kernel's shapes");
    for (const QkNormRopeBackward* s : {&q, &k}) {
      Tensor unrotated = Tensor::empty(s->dy.shape(), s->dy.dtype(), s->dy.device());
      Tensor dx = s->dx, dweight = s->dweight;
      cuda::rope_backward(s->dy, positions, table, unrotated);
      cuda::rmsnorm_backward(unrotated, s->x, s->weight, s->rstd, dx, dweight, false);
    }
    return;
  }
  AMBER_CHECK(!q_dy_sum || dtype_size(q.x.dtype()) == 2, op,
              ": q's gradient as an ordered sum needs bf16 or f16 tensors, got ", dtype_name(q.x.dtype()));
  for (const QkNormRopeBackward* s : {&q, &k}) {
    for (const Tensor* t : {&s->dy, &s->weight}) {
      if (!t->defined()) continue;
      require_contiguous(*t, op);
      require_same_dtype(*t, q.x, "a gradient or weight", op);
    }
    require_same_dtype(s->dx, q.x, "an input gradient", op);
    require_f32_stat(s->rstd, op);
  }
  require_contiguous(positions, op);
  const int64_t tokens = q.x.size(0), d = q.x.size(2);
  if (tokens == 0) return;
  const RopeParams p = rope_params(table, -1.0, op);
  Tensor q_partial, k_partial;
  with_element_type(q.x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    with_lanes_per_row(lanes, [&](auto lanes_tag) {
      const auto launch = [&](auto sums_tag) {
        constexpr bool kSums = decltype(sums_tag)::value;
        const auto kernel = qk_norm_rope_backward_kernel<T, decltype(lanes_tag)::value, kSums>;
        const size_t smem = sizeof(BackwardShared<kSums>);
        const unsigned blocks = wave_blocks(kernel, smem, tokens, op);
        const auto partials = [&](const QkNormRopeBackward& s) {
          return s.weight.defined() && s.dweight.defined() ? Tensor::empty({blocks, d}, DType::f32, s.x.device())
                                                           : Tensor();
        };
        q_partial = partials(q);
        k_partial = partials(k);
        const auto partial_data = [](Tensor& t) { return t.defined() ? static_cast<float*>(t.raw()) : nullptr; };
        kernel<<<blocks, kThreads, smem, current_stream()>>>(
            backward_side<T>(q, q_dy_sum, partial_data(q_partial), "q", op),
            backward_side<T>(k, nullptr, partial_data(k_partial), "k", op),
            static_cast<const int32_t*>(positions.raw()), p, tokens);
      };
      if constexpr (sizeof(T) == 2) {
        if (q_dy_sum) return launch(std::true_type{});
      }
      launch(std::false_type{});
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
