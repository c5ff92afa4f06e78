// CUDA varlen attention, the portable first version: fp32 SIMT tiles in shared memory
// (no tensor cores yet), an online-softmax forward, and a backward whose dQ and dK/dV
// kernels each own their outputs and sum in a fixed order, so gradients are bit-identical.
#include <cmath>

#include "amber/ops/cuda/attention.h"
#include "amber/ops/cuda/common.cuh"

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

// Geometry of one call. Tiles start at document starts (from cu_seqlens on the device);
// grid.x enumerates (document, tile) slots, tiles_per_doc = ceil(max_seqlen / kRows),
// and slots past a document's end exit at once.
struct Layout {
  const int32_t* cu_seqlens;
  int heads, kv_heads, window, tiles_per_doc;
  float scale;
};

struct TileRange {
  int64_t doc_start;
  int length, begin, rows;  // rows = tile rows that exist (<= kRows)
};

__device__ __forceinline__ bool tile_of(const Layout& g, TileRange& t) {
  const int doc = blockIdx.x / g.tiles_per_doc;
  t.doc_start = g.cu_seqlens[doc];
  t.length = g.cu_seqlens[doc + 1] - g.cu_seqlens[doc];
  t.begin = (blockIdx.x % g.tiles_per_doc) * kRows;
  t.rows = min(kRows, t.length - t.begin);
  return t.begin < t.length;
}

// Query i sees key j of its document iff j <= i and (no window or j > i - window).
__device__ __forceinline__ bool visible(int i, int j, int window) {
  return j <= i && (window == 0 || j > i - window);
}

__device__ __forceinline__ int first_key(int i, int window) {
  return window > 0 ? max(0, i - window + 1) : 0;
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

template <class T>
struct ForwardArgs {
  const T *q, *k, *v;
  const float* sinks;  // [heads] or null
  T* out;
  float* lse;
};

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
  if (!tile_of(g, t)) return;
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

// delta[t, h] = dout . out of that row, one warp per row, fp32.
template <class T>
__global__ void delta_kernel(const T* dout, const T* out, int64_t rows, int dim, float* delta) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (row >= rows) return;
  float s = 0.0f;
  for (int d = threadIdx.x % 32; d < dim; d += 32)
    s = fmaf(to_f32(dout[row * dim + d]), to_f32(out[row * dim + d]), s);
  s = warp_sum(s);
  if (threadIdx.x % 32 == 0) delta[row] = s;
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
  if (!tile_of(g, t)) return;
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
  if (!tile_of(g, t)) return;
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

// partial[h] = -sum over tokens of exp(sink_h - lse[t, h]) * delta[t, h]: a sink moves
// only the normaliser (d lse / d s_h = P_sink, d loss / d lse = -delta). One block per
// head with a fixed thread-to-token map and a fixed reduction tree: deterministic.
__global__ void dsinks_kernel(const float* sinks, const float* lse, const float* delta,
                              int64_t tokens, int heads, float* partial) {
  __shared__ float scratch[32];
  const int h = blockIdx.x;
  float s = 0.0f;
  for (int64_t t = threadIdx.x; t < tokens; t += blockDim.x)
    s -= expf(sinks[h] - lse[t * heads + h]) * delta[t * heads + h];
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) partial[h] = s;
}

template <class S>
__global__ void widen_kernel(const S* in, int n, float* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = to_f32(in[i]);
}

// The sinks as f32 on the device (they may be f32, bf16 or f16, like a master copy).
Tensor sinks_f32(const Tensor& sinks, const char* op) {
  if (!sinks.defined() || sinks.dtype() == DType::f32) return sinks;
  Tensor out = Tensor::empty(sinks.shape(), DType::f32, sinks.device());
  const int n = static_cast<int>(sinks.numel());
  with_element_type(sinks.dtype(), op, [&](auto tag) {
    using S = decltype(tag);
    widen_kernel<S><<<(n + 255) / 256, 256, 0, cudaStreamPerThread>>>(
        static_cast<const S*>(sinks.raw()), n, static_cast<float*>(out.raw()));
  });
  check_launch(op, sinks.shape());
  return out;
}

Layout layout_of(const Tensor& q, const Tensor& k, const SeqInfo& seq,
                 const AttentionOptions& options, const char* op) {
  // The grid is sized by max_seqlen; a smaller value would leave rows unwritten.
  for (int d = 0; d < seq.num_docs; ++d)
    AMBER_CHECK(seq.doc_length(d) <= seq.max_seqlen, op, ": document ", d, " has ",
                seq.doc_length(d), " tokens but seq.max_seqlen is ", seq.max_seqlen);
  return {static_cast<const int32_t*>(seq.cu_seqlens.raw()), static_cast<int>(q.size(1)),
          static_cast<int>(k.size(1)), options.window, (seq.max_seqlen + kRows - 1) / kRows,
          static_cast<float>(options.softmax_scale)};
}

// Blocks of (document, tile) slots by `heads`; checked against the grid limits.
dim3 grid_of(const SeqInfo& seq, const Layout& g, int heads, const char* op) {
  const int64_t slots = static_cast<int64_t>(seq.num_docs) * g.tiles_per_doc;
  AMBER_CHECK(slots < (int64_t{1} << 31) && heads <= 65535, op, ": ", seq.num_docs,
              " documents of up to ", seq.max_seqlen, " tokens with ", heads,
              " heads exceed the launch grid");
  return dim3(static_cast<unsigned>(slots), static_cast<unsigned>(heads));
}

// Raises the kernel's dynamic shared-memory limit (a host-side attribute, no sync; set
// on every call because it is per device).
template <class Kernel>
void prepare_smem(Kernel kernel, size_t bytes, const char* op) {
  AMBER_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   static_cast<int>(bytes)) == cudaSuccess,
              op, ": cannot raise the shared-memory limit to ", bytes, " bytes");
}

// Calls fn.template operator()<D>() for a supported head dim.
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

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const SeqInfo& seq,
                       const AttentionOptions& options, const Tensor& sinks, Tensor& out,
                       Tensor& lse) {
  const char* op = "attention_forward";
  if (seq.total_tokens == 0) return;
  const Layout g = layout_of(q, k, seq, options, op);
  const dim3 grid = grid_of(seq, g, g.heads, op);
  const Tensor sinks32 = sinks_f32(sinks, op);
  with_element_type(q.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    with_head_dim(q.size(2), q.shape(), op, [&]<int D>() {
      const size_t smem = ((kRows + 2 * kCols) * stride_of<D>() + kRows * kCols) * sizeof(float);
      prepare_smem(forward_kernel<T, D>, smem, op);
      forward_kernel<T, D><<<grid, kThreads, smem, cudaStreamPerThread>>>(
          g, ForwardArgs<T>{ptr<T>(q), ptr<T>(k), ptr<T>(v),
                            sinks32.defined() ? ptr<float>(sinks32) : nullptr,
                            static_cast<T*>(out.raw()), static_cast<float*>(lse.raw())});
    });
  });
  check_launch(op, q.shape());
}

void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out, const Tensor& lse, const SeqInfo& seq,
                        const AttentionOptions& options, const Tensor& sinks, Tensor& dq,
                        Tensor& dk, Tensor& dv, Tensor& dsinks) {
  const char* op = "attention_backward";
  if (seq.total_tokens == 0) return;
  const Layout g = layout_of(q, k, seq, options, op);
  const int64_t rows = seq.total_tokens * g.heads;
  Tensor delta = Tensor::empty({seq.total_tokens, g.heads}, DType::f32, q.device());
  with_element_type(q.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    delta_kernel<T><<<static_cast<unsigned>((rows + kWarps - 1) / kWarps), kThreads, 0,
                      cudaStreamPerThread>>>(ptr<T>(dout), ptr<T>(out), rows,
                                             static_cast<int>(q.size(2)),
                                             static_cast<float*>(delta.raw()));
    check_launch(op, q.shape());
    const BackwardArgs<T> a{ptr<T>(q),
                            ptr<T>(k),
                            ptr<T>(v),
                            ptr<T>(dout),
                            ptr<float>(lse),
                            ptr<float>(delta),
                            static_cast<T*>(dq.raw()),
                            static_cast<T*>(dk.raw()),
                            static_cast<T*>(dv.raw())};
    with_head_dim(q.size(2), q.shape(), op, [&]<int D>() {
      const size_t dq_smem =
          ((2 * kRows + 2 * kCols) * stride_of<D>() + kRows * kCols) * sizeof(float);
      prepare_smem(backward_dq_kernel<T, D>, dq_smem, op);
      backward_dq_kernel<T, D><<<grid_of(seq, g, g.heads, op), kThreads, dq_smem,
                                 cudaStreamPerThread>>>(g, a);
      check_launch(op, q.shape());
      const size_t dkdv_smem =
          ((2 * kRows + 2 * kCols) * stride_of<D>() + 2 * kRows * kCols + 2 * kCols) *
          sizeof(float);
      prepare_smem(backward_dkdv_kernel<T, D>, dkdv_smem, op);
      backward_dkdv_kernel<T, D><<<grid_of(seq, g, g.kv_heads, op), kThreads, dkdv_smem,
                                   cudaStreamPerThread>>>(g, a);
      check_launch(op, k.shape());
    });
  });
  if (!sinks.defined()) return;
  const Tensor sinks32 = sinks_f32(sinks, op);
  Tensor partial = Tensor::empty({1, g.heads}, DType::f32, q.device());
  dsinks_kernel<<<static_cast<unsigned>(g.heads), kThreads, 0, cudaStreamPerThread>>>(
      ptr<float>(sinks32), ptr<float>(lse), ptr<float>(delta), seq.total_tokens, g.heads,
      static_cast<float*>(partial.raw()));
  check_launch(op, sinks.shape());
  add_column_sums(partial, dsinks, op);
}

}  // namespace amber::cuda
