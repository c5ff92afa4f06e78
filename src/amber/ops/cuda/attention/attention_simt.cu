// CUDA varlen attention in fp32 SIMT tiles: the path for f32 inputs and head_dim 32,
// and the plain reference design the tensor-core kernels follow. An online-softmax
// forward, and a backward whose dQ and dK/dV kernels each own their outputs and sum in
// a fixed order, so gradients are bit-identical from run to run.
#include <cmath>

#include "amber/core/stream.h"
#include "amber/ops/cuda/attention/attention_tiles.cuh"
#include "amber/ops/cuda/common/common.cuh"

namespace amber::cuda {
namespace {

// Every kernel runs 8 warps. A block owns kRows rows (query rows in the forward and dQ,
// keys in dK/dV), 8 per warp, and walks the other side in steps of kCols, one per lane,
// so a score is one lane's dot product and a softmax row is one warp's shuffle.
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = 64;
constexpr int kCols = 32;
constexpr int kRowsPerWarp = kRows / kWarps;

// Shared-memory row stride in floats: D + 4 keeps rows 16-byte aligned for float4 reads,
// and shifts consecutive rows by 4 banks, so the 8 lanes of a quarter-warp reading
// different rows at one column hit different banks.
template <int D>
constexpr int stride_of() {
  return D + 4;
}

// Copies rows [first, first + n) of head `head` (document-relative, of a [T, heads, D]
// tensor) into dst [n][stride] as fp32; rows at or past `limit` become zeros.
template <class T, int D>
__device__ __forceinline__ void load_rows(const T* src, int64_t doc_start, int first, int n,
                                          int limit, int heads, int head, float* dst) {
  constexpr int S = stride_of<D>();
  for (int idx = threadIdx.x; idx < n * D; idx += kThreads) {
    const int r = idx / D, d = idx % D, row = first + r;
    dst[r * S + d] =
        row < limit ? to_f32(src[((doc_start + row) * heads + head) * static_cast<int64_t>(D) + d])
                    : 0.0f;
  }
}

// s[r] = a[r] . b[lane] for this warp's rows r of a (a already offset to the warp's
// first row); a is read as a broadcast, b one row per lane.
template <int D>
__device__ __forceinline__ void warp_scores(const float* a, const float* b, float (&s)[kRowsPerWarp]) {
  constexpr int S = stride_of<D>();
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) s[r] = 0.0f;
#pragma unroll 4
  for (int d = 0; d < D; d += 4) {
    const float4 bv = *reinterpret_cast<const float4*>(b + lane * S + d);
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const float4 av = *reinterpret_cast<const float4*>(a + r * S + d);
      s[r] = fmaf(av.x, bv.x, fmaf(av.y, bv.y, fmaf(av.z, bv.z, fmaf(av.w, bv.w, s[r]))));
    }
  }
}

// DL consecutive floats in one access: a quarter-warp then reads 128 contiguous bytes,
// where DL scalar loads at a lane stride of DL words would conflict DL ways.
template <int DL>
__device__ __forceinline__ void load_lane(const float* p, float (&v)[DL]) {
  if constexpr (DL == 4) {
    const float4 x = *reinterpret_cast<const float4*>(p);
    v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
  } else if constexpr (DL == 2) {
    const float2 x = *reinterpret_cast<const float2*>(p);
    v[0] = x.x, v[1] = x.y;
  } else {
    static_assert(DL == 1, "head_dim 32, 64 or 128");
    v[0] = *p;
  }
}

// acc[r][e] += sum over c of w[r][c] * m[c][lane * DL + e]: the warp's rows of a
// [kRows][kCols] weight tile (w already offset to the warp's first row) times a
// [kCols][stride] matrix, each lane owning DL = D / 32 consecutive columns.
template <int D>
__device__ __forceinline__ void warp_accumulate(const float* w, const float* m,
                                                float (&acc)[kRowsPerWarp][D / 32]) {
  constexpr int S = stride_of<D>(), DL = D / 32;
  const int lane = threadIdx.x % 32;
#pragma unroll 4
  for (int c = 0; c < kCols; ++c) {
    float mv[DL];
    load_lane<DL>(m + c * S + lane * DL, mv);
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const float wr = w[r * kCols + c];
#pragma unroll
      for (int e = 0; e < DL; ++e) acc[r][e] = fmaf(wr, mv[e], acc[r][e]);
    }
  }
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// One block per (query tile, head). Key tiles run from the tile holding the first key
// the tile's first row may see (window) to the tile's last row (causal): tiles that are
// wholly masked are never loaded.
template <class T, int D>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(Layout g, ForwardArgs<T> a) {
  constexpr int S = stride_of<D>(), DL = D / 32;
  extern __shared__ float4 smem4[];
  float* sq = reinterpret_cast<float*>(smem4);  // [kRows][S]
  float* sk = sq + kRows * S;                     // [kCols][S]
  float* sv = sk + kCols * S;                     // [kCols][S]
  float* sp = sv + kCols * S;                     // [kRows][kCols] probabilities
  TileRange t;
  if (!tile_of(g, false, t)) return;
  const int h = blockIdx.y, kvh = h / (g.heads / g.kv_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = warp * kRowsPerWarp;
  const int tile_end = t.begin + t.rows;
  load_rows<T, D>(a.q, t.doc_start, t.begin, kRows, tile_end, g.heads, h, sq);

  // The sink is a key of logit s_h seen first: (max, sum) start at (s_h, 1) and its
  // zero value leaves the accumulator at zero.
  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][DL];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    m[r] = a.sinks ? a.sinks[h] : -INFINITY;
    l[r] = a.sinks ? 1.0f : 0.0f;
#pragma unroll
    for (int e = 0; e < DL; ++e) acc[r][e] = 0.0f;
  }
  for (int kt = first_key(t.begin, g.window) / kCols * kCols; kt < tile_end; kt += kCols) {
    __syncthreads();  // the previous step's reads of sk, sv are done (and sq is loaded)
    load_rows<T, D>(a.k, t.doc_start, kt, kCols, tile_end, g.kv_heads, kvh, sk);
    load_rows<T, D>(a.v, t.doc_start, kt, kCols, tile_end, g.kv_heads, kvh, sv);
    __syncthreads();
    float s[kRowsPerWarp];
    warp_scores<D>(sq + r0 * S, sk, s);
    const int j = kt + lane;
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int i = t.begin + r0 + r;
      const float x = i < tile_end && visible(i, j, g.window) ? s[r] * g.scale : -INFINITY;
      const float new_max = fmaxf(m[r], warp_max(x));
      // A row that has seen nothing yet (no sink, all masked) keeps max -inf: use 0 as
      // the reference so exp gives 0 instead of NaN.
      const float ref = new_max == -INFINITY ? 0.0f : new_max;
      const float p = expf(x - ref), rescale = expf(m[r] - ref);
      l[r] = l[r] * rescale + warp_sum(p);
      m[r] = new_max;
#pragma unroll
      for (int e = 0; e < DL; ++e) acc[r][e] *= rescale;
      sp[(r0 + r) * kCols + lane] = p;
    }
    __syncwarp();  // the warp reads back only its own rows of sp
    warp_accumulate<D>(sp + r0 * kCols, sv, acc);
    __syncwarp();  // ... before the next step overwrites them
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int i = t.begin + r0 + r;
    if (i >= tile_end) continue;
    const int64_t row = (t.doc_start + i) * g.heads + h;
    const float inv = 1.0f / l[r];
#pragma unroll
    for (int e = 0; e < DL; ++e) a.out[row * D + lane * DL + e] = from_f32<T>(acc[r][e] * inv);
    if (lane == 0) a.lse[row] = m[r] + logf(l[r]);
  }
}

template <class T>
struct BackwardArgs {
  const T *q, *k, *v, *dout;
  const float *lse, *delta;
  T *dq, *dk, *dv;
};

// dQ = scale * sum_j dS_ij k_j with dS = P (dP - delta), P = exp(scale q.k - lse): one
// block per (query tile, head) owns its rows, keys walked in order.
template <class T, int D>
__global__ void __launch_bounds__(kThreads)
    backward_dq_kernel(Layout g, BackwardArgs<T> a) {
  constexpr int S = stride_of<D>(), DL = D / 32;
  extern __shared__ float4 smem4[];
  float* sq = reinterpret_cast<float*>(smem4);  // [kRows][S]
  float* sdo = sq + kRows * S;                    // [kRows][S]
  float* sk = sdo + kRows * S;                    // [kCols][S]
  float* sv = sk + kCols * S;                     // [kCols][S]
  float* sds = sv + kCols * S;                    // [kRows][kCols]
  TileRange t;
  if (!tile_of(g, false, t)) return;
  const int h = blockIdx.y, kvh = h / (g.heads / g.kv_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = warp * kRowsPerWarp;
  const int tile_end = t.begin + t.rows;
  load_rows<T, D>(a.q, t.doc_start, t.begin, kRows, tile_end, g.heads, h, sq);
  load_rows<T, D>(a.dout, t.doc_start, t.begin, kRows, tile_end, g.heads, h, sdo);
  float lse[kRowsPerWarp], delta[kRowsPerWarp], acc[kRowsPerWarp][DL];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int i = t.begin + r0 + r;
    const int64_t stat = (t.doc_start + min(i, tile_end - 1)) * g.heads + h;
    lse[r] = a.lse[stat];
    delta[r] = a.delta[stat];
#pragma unroll
    for (int e = 0; e < DL; ++e) acc[r][e] = 0.0f;
  }
  for (int kt = first_key(t.begin, g.window) / kCols * kCols; kt < tile_end; kt += kCols) {
    __syncthreads();
    load_rows<T, D>(a.k, t.doc_start, kt, kCols, tile_end, g.kv_heads, kvh, sk);
    load_rows<T, D>(a.v, t.doc_start, kt, kCols, tile_end, g.kv_heads, kvh, sv);
    __syncthreads();
    float s[kRowsPerWarp], dp[kRowsPerWarp];
    warp_scores<D>(sq + r0 * S, sk, s);
    warp_scores<D>(sdo + r0 * S, sv, dp);
    const int j = kt + lane;
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int i = t.begin + r0 + r;
      const float p = i < tile_end && visible(i, j, g.window) ? expf(s[r] * g.scale - lse[r]) : 0.0f;
      sds[(r0 + r) * kCols + lane] = p * (dp[r] - delta[r]);
    }
    __syncwarp();
    warp_accumulate<D>(sds + r0 * kCols, sk, acc);
    __syncwarp();
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int i = t.begin + r0 + r;
    if (i >= tile_end) continue;
    const int64_t row = ((t.doc_start + i) * g.heads + h) * D + lane * DL;
#pragma unroll
    for (int e = 0; e < DL; ++e) a.dq[row + e] = from_f32<T>(g.scale * acc[r][e]);
  }
}

// dK and dV: one block per (key tile, KV head). It walks the query heads of its group,
// then their query tiles, in a fixed order and sums into registers, so the GQA reduction
// needs no atomics and its rounding never depends on scheduling. P is recomputed here a
// second time (the dQ kernel did too); that is the price of owning the outputs.
template <class T, int D>
__global__ void __launch_bounds__(kThreads)
    backward_dkdv_kernel(Layout g, BackwardArgs<T> a) {
  constexpr int S = stride_of<D>(), DL = D / 32;
  extern __shared__ float4 smem4[];
  float* sk = reinterpret_cast<float*>(smem4);  // [kRows][S] keys of the tile
  float* sv = sk + kRows * S;                     // [kRows][S]
  float* sq = sv + kRows * S;                     // [kCols][S] queries of one step
  float* sdo = sq + kCols * S;                    // [kCols][S]
  float* sp = sdo + kCols * S;                    // [kRows][kCols] P, key-major
  float* sds = sp + kRows * kCols;                // [kRows][kCols] dS, key-major
  float* slse = sds + kRows * kCols;              // [kCols]
  float* sdelta = slse + kCols;                   // [kCols]
  TileRange t;
  if (!tile_of(g, false, t)) return;
  const int kvh = blockIdx.y, group = g.heads / g.kv_heads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = warp * kRowsPerWarp;
  const int tile_end = t.begin + t.rows;
  load_rows<T, D>(a.k, t.doc_start, t.begin, kRows, tile_end, g.kv_heads, kvh, sk);
  load_rows<T, D>(a.v, t.doc_start, t.begin, kRows, tile_end, g.kv_heads, kvh, sv);
  // Query i sees key j iff j <= i < j + window: queries from the tile's first key to
  // the last key's window end.
  const int query_end = g.window > 0 ? min(t.length, tile_end - 1 + g.window) : t.length;
  float dk[kRowsPerWarp][DL], dv[kRowsPerWarp][DL];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
    for (int e = 0; e < DL; ++e) dk[r][e] = dv[r][e] = 0.0f;
  for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
    for (int qt = t.begin; qt < query_end; qt += kCols) {
      __syncthreads();
      load_rows<T, D>(a.q, t.doc_start, qt, kCols, query_end, g.heads, h, sq);
      load_rows<T, D>(a.dout, t.doc_start, qt, kCols, query_end, g.heads, h, sdo);
      if (threadIdx.x < kCols) {
        const int i = qt + threadIdx.x;
        const int64_t stat = (t.doc_start + min(i, query_end - 1)) * g.heads + h;
        slse[threadIdx.x] = a.lse[stat];
        sdelta[threadIdx.x] = a.delta[stat];
      }
      __syncthreads();
      float s[kRowsPerWarp], dp[kRowsPerWarp];
      warp_scores<D>(sk + r0 * S, sq, s);   // s[r] = k_{r0+r} . q_lane
      warp_scores<D>(sv + r0 * S, sdo, dp);  // dp[r] = v_{r0+r} . dout_lane
      const int i = qt + lane;
      const float lse = slse[lane], delta = sdelta[lane];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const int j = t.begin + r0 + r;
        const float p = j < tile_end && i < query_end && visible(i, j, g.window)
                            ? expf(s[r] * g.scale - lse)
                            : 0.0f;
        sp[(r0 + r) * kCols + lane] = p;
        sds[(r0 + r) * kCols + lane] = p * (dp[r] - delta);
      }
      __syncwarp();
      warp_accumulate<D>(sp + r0 * kCols, sdo, dv);
      warp_accumulate<D>(sds + r0 * kCols, sq, dk);
      __syncwarp();
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int j = t.begin + r0 + r;
    if (j >= tile_end) continue;
    const int64_t row = ((t.doc_start + j) * g.kv_heads + kvh) * D + lane * DL;
#pragma unroll
    for (int e = 0; e < DL; ++e) {
      a.dk[row + e] = from_f32<T>(g.scale * dk[r][e]);
      a.dv[row + e] = from_f32<T>(dv[r][e]);
    }
  }
}


// Calls fn.template operator()<D>() for a head dim the SIMT kernels take.
template <class Fn>
void with_head_dim(int64_t dim, const Shape& shape, const char* op, Fn&& fn) {
  switch (dim) {
    case 32: fn.template operator()<32>(); return;
    case 64: fn.template operator()<64>(); return;
    case 128: fn.template operator()<128>(); return;
    default:
      fail(op, ": the CUDA kernels take head_dim 32, 64 or 128; q ", shape, " has ", dim,
           "; run this shape on the CPU");
  }
}

template <class T>
const T* ptr(const Tensor& t) {
  return static_cast<const T*>(t.raw());
}

}  // namespace

namespace simt {

void forward(const Tensor& q, const Tensor& k, const Tensor& v, const Layout& unplanned,
             DerivedTensors& plans, const float* sinks, Tensor& out, Tensor& lse) {
  const char* op = "attention_forward";
  const Layout g = with_tile_plan(unplanned, kRows, false, q.device(), plans, op);
  const dim3 grid = attention_grid(g, g.heads, op);
  with_element_type(q.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    with_head_dim(q.size(2), q.shape(), op, [&]<int D>() {
      const size_t smem = ((kRows + 2 * kCols) * stride_of<D>() + kRows * kCols) * sizeof(float);
      allow_smem(reinterpret_cast<const void*>(forward_kernel<T, D>), smem, op);
      forward_kernel<T, D><<<grid, kThreads, smem, current_stream()>>>(
          g, ForwardArgs<T>{ptr<T>(q), ptr<T>(k), ptr<T>(v), sinks, static_cast<T*>(out.raw()),
                            static_cast<float*>(lse.raw())});
    });
  });
  check_launch(op, q.shape());
}

void backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
              const Tensor& lse, const Tensor& delta, const Layout& unplanned, DerivedTensors& plans,
              Tensor& dq, Tensor& dk, Tensor& dv) {
  const char* op = "attention_backward";
  const Layout g = with_tile_plan(unplanned, kRows, false, q.device(), plans, op);
  with_element_type(q.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const BackwardArgs<T> a{ptr<T>(q),        ptr<T>(k),           ptr<T>(v),
                            ptr<T>(dout),     ptr<float>(lse),     ptr<float>(delta),
                            static_cast<T*>(dq.raw()), static_cast<T*>(dk.raw()),
                            static_cast<T*>(dv.raw())};
    with_head_dim(q.size(2), q.shape(), op, [&]<int D>() {
      const size_t dq_smem =
          ((2 * kRows + 2 * kCols) * stride_of<D>() + kRows * kCols) * sizeof(float);
      allow_smem(reinterpret_cast<const void*>(backward_dq_kernel<T, D>), dq_smem, op);
      backward_dq_kernel<T, D><<<attention_grid(g, g.heads, op), kThreads, dq_smem,
                                 current_stream()>>>(g, a);
      check_launch(op, q.shape());
      const size_t dkdv_smem =
          ((2 * kRows + 2 * kCols) * stride_of<D>() + 2 * kRows * kCols + 2 * kCols) *
          sizeof(float);
      allow_smem(reinterpret_cast<const void*>(backward_dkdv_kernel<T, D>), dkdv_smem, op);
      backward_dkdv_kernel<T, D><<<attention_grid(g, g.kv_heads, op), kThreads,
                                   dkdv_smem, current_stream()>>>(g, a);
      check_launch(op, k.shape());
    });
  });
}

}  // namespace simt
}  // namespace amber::cuda
