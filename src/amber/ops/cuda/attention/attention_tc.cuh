// Building blocks of the tensor-core attention kernels: asynchronous tile loads into
// padded shared memory and the two warp-level products every pass is made of, each
// for one warp's 16 rows.
#pragma once

#include "amber/core/stream.h"
#include "amber/ops/cuda/attention/attention_tiles.cuh"
#include "amber/ops/cuda/common/common.cuh"
#include "amber/ops/cuda/common/mma.cuh"

namespace amber::cuda::tensor_core {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Shared-memory row stride in elements: D + 8 shifts consecutive rows by 16 bytes, so
// the 8 row addresses of one ldmatrix fall in 8 different bank groups.
template <int D>
constexpr int stride_of() {
  return D + 8;
}

// Starts copying rows [first, first + n) of head `head` (document-relative, of a
// [T, heads, D] tensor) into dst [n][stride]; rows at or past `limit` become zeros and
// are never read. Completion is the caller's cp_async_commit / cp_async_wait.
template <class T, int D, int kThreads>
__device__ __forceinline__ void async_rows(const T* src, int64_t doc_start, int first, int n,
                                           int limit, int heads, int head, T* dst) {
  constexpr int chunks = D / 8;  // 16-byte pieces per row
  for (int idx = threadIdx.x; idx < n * chunks; idx += kThreads) {
    const int r = idx / chunks, c = idx % chunks, row = first + r;
    const bool valid = row < limit;
    const T* from = valid ? src + ((doc_start + row) * heads + head) * static_cast<int64_t>(D) + c * 8 : src;
    cp_async_16(dst + r * stride_of<D>() + c * 8, from, valid);
  }
}

// The A operand fragments of the warp's 16 rows x K (row-major in shared memory with
// stride S), for operands every stage of a block reuses: held in registers, they are
// read from shared memory once instead of once per stage.
template <class T, int K, int S>
__device__ __forceinline__ void load_a(uint32_t (&a)[K / 16][4], const T* rows) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) ldmatrix_x4(a[kk], rows + (lane % 16) * S + kk * 16 + (lane / 16) * 8);
}

// The top of a pipeline step: starts copying stage + 1 (when there is one) into the
// other buffer, waits for this stage's copies, and a barrier makes them visible to
// every warp. load_stage(i) issues the cp.async copies of stage i.
template <class Load>
__device__ __forceinline__ void next_stage(int stage, int stages, const Load& load_stage) {
  if (stage + 1 < stages) {
    load_stage(stage + 1);
    cp_async_commit();
    cp_async_wait<1>();
  } else {
    cp_async_wait<0>();
  }
  __syncthreads();
}

// acc[n / 8][4] += A[:, 16kk .. 16kk+15] B[:, same]^T for the warp: a is that 16x16
// slice of A as a fragment, B is N rows row-major in shared memory with stride S.
template <class T, int N, int S>
__device__ __forceinline__ void abt_slice(float (&acc)[N / 8][4], const uint32_t (&a)[4], const T* b, int kk) {
  static_assert(N % 16 == 0, "tiles are whole 16x16 fragments");
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int np = 0; np < N / 16; ++np) {
    uint32_t bf[4];
    ldmatrix_x4(bf, b + (np * 16 + lane % 8 + (lane / 16) * 8) * S + kk * 16 + ((lane / 8) % 2) * 8);
    mma_16816<T>(acc[2 * np], a, bf[0], bf[1]);
    mma_16816<T>(acc[2 * np + 1], a, bf[2], bf[3]);
  }
}

// acc[n / 8][4] += A B^T for the warp: A is 16 rows x K given as fragments (load_a),
// B is N rows x K row-major in shared memory with stride S.
template <class T, int K, int N, int S>
__device__ __forceinline__ void warp_abt(float (&acc)[N / 8][4], const uint32_t (&a)[K / 16][4], const T* b) {
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) abt_slice<T, N, S>(acc, a[kk], b, kk);
}

// As above with A read from shared memory (a points at the warp's first row), for
// operands that would not fit in registers next to the accumulators.
template <class T, int K, int N, int S>
__device__ __forceinline__ void warp_abt(float (&acc)[N / 8][4], const T* a, const T* b) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
    uint32_t af[4];
    ldmatrix_x4(af, a + (lane % 16) * S + kk * 16 + (lane / 16) * 8);
    abt_slice<T, N, S>(acc, af, b, kk);
  }
}

// acc[D / 8][4] += P B for the warp: P is 16 rows x N held as accumulators (rounded to
// T here), B is N rows x D row-major in shared memory with stride S.
template <class T, int N, int D, int S>
__device__ __forceinline__ void warp_pb(float (&acc)[D / 8][4], const float (&p)[N / 8][4],
                                        const T* b) {
  static_assert(N % 16 == 0 && D % 16 == 0, "tiles are whole 16x16 fragments");
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int kk = 0; kk < N / 16; ++kk) {
    uint32_t af[4];
    accumulators_to_a<T>(p[2 * kk], p[2 * kk + 1], af);
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t bf[4];
      ldmatrix_x4_trans(bf, b + (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * S + dp * 16 + (lane / 16) * 8);
      mma_16816<T>(acc[2 * dp], af, bf[0], bf[1]);
      mma_16816<T>(acc[2 * dp + 1], af, bf[2], bf[3]);
    }
  }
}

// The document-relative row and column of accumulator element e of n-tile nt, for a
// warp whose 16 rows start at row0 and whose columns start at col0.
struct Fragment {
  int row0, col0;
  __device__ __forceinline__ int row(int e) const { return row0 + (threadIdx.x % 32) / 4 + (e / 2) * 8; }
  __device__ __forceinline__ int col(int nt, int e) const {
    return col0 + nt * 8 + 2 * (threadIdx.x % 4) + e % 2;
  }
};

// The first key of the documents of a lane's two fragment rows (rows 2r of a Fragment)
// relative to the tile's segment: where short documents are packed (Layout), a row
// sees only its own document's keys. of() is for a packed segment; the default, a
// segment of one document, bounds nothing.
struct RowDocuments {
  int start[2] = {0, 0};
  __device__ __forceinline__ static RowDocuments of(const Layout& g, const TileRange& t, const Fragment& f) {
    RowDocuments docs;
    for (int r = 0; r < 2; ++r) docs.start[r] = document_start(g, t, f.row(2 * r));
    return docs;
  }
};

// The visible part of a lane's fragment row r as a range [lo[r], hi[r]) of column
// offsets c = nt * 8 + e % 2 from the lane's first column, so a mask compares
// unrolled immediates against two registers per row instead of rebuilding each
// element's indices (which, beside a full set of accumulators, spilled).
struct VisibleSpan {
  int lo[2], hi[2];
  __device__ __forceinline__ bool has(int nt, int e) const {
    const int c = nt * 8 + e % 2;
    return c >= lo[e / 2] && c < hi[e / 2];
  }
  // Rows are queries i, columns keys j of the row's document: visible(i, j, window).
  __device__ __forceinline__ static VisibleSpan keys_of_queries(const Fragment& f, int window,
                                                                const RowDocuments& docs = {}) {
    VisibleSpan v;
    const int first = f.col(0, 0);
    for (int r = 0; r < 2; ++r) {
      const int i = f.row(2 * r);
      v.lo[r] = max(window > 0 ? i - window + 1 : 0, docs.start[r]) - first;
      v.hi[r] = i + 1 - first;
    }
    return v;
  }
  // Rows are keys j, columns queries i before query_end: visible(i, j, window).
  __device__ __forceinline__ static VisibleSpan queries_of_keys(const Fragment& f, int window, int query_end) {
    VisibleSpan v;
    const int first = f.col(0, 0);
    for (int r = 0; r < 2; ++r) {
      const int j = f.row(2 * r);
      v.lo[r] = j - first;
      v.hi[r] = (window > 0 ? min(query_end, j + window) : query_end) - first;
    }
    return v;
  }
};

// Max and sum over the four lanes that hold one accumulator row.
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// The forward's online softmax for the warp's two rows per lane, in the log2 domain:
// the running max m and sum l per row. The sink is a key of logit s_h seen first:
// (max, sum) start at (s_h, 1), the sum counted once per row (by the quad's first
// lane), and its zero value adds nothing.
struct OnlineSoftmax {
  float m[2], l[2];

  __device__ OnlineSoftmax(const float* sinks, int head) {
    for (int r = 0; r < 2; ++r) {
      m[r] = sinks ? sinks[head] * kLog2e : -INFINITY;
      l[r] = sinks && threadIdx.x % 4 == 0 ? 1.0f : 0.0f;
    }
  }

  // One stage of raw scores s (16 rows x N keys, this warp's, at fragment f): masks
  // the invisible keys (by window and by the rows' documents) when `edge`, moves the
  // max and the sums to the stage, and leaves the stage's unnormalised probabilities
  // in s and, per row r, the factor by which the output so far must be rescaled. exp2
  // is the family's.
  template <int N, class Exp2>
  __device__ __forceinline__ void exponentiate(float (&s)[N / 8][4], const Fragment& f, bool edge, int window,
                                               float scale_log2, Exp2 exp2, float (&rescale)[2],
                                               const RowDocuments& docs = {}) {
    if (edge) {
      const VisibleSpan seen = VisibleSpan::keys_of_queries(f, window, docs);
#pragma unroll
      for (int nt = 0; nt < N / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (!seen.has(nt, e)) s[nt][e] = -INFINITY;
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < N / 8; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
      const float m_new = fmaxf(m[r], quad_max(mx) * scale_log2);
      // A row that has seen nothing yet keeps max -inf: 0 as the reference gives
      // exp2 = 0 instead of NaN.
      const float ref = m_new == -INFINITY ? 0.0f : m_new;
      rescale[r] = exp2(m[r] - ref);
      m[r] = m_new;
      l[r] *= rescale[r];
#pragma unroll
      for (int nt = 0; nt < N / 8; ++nt)
#pragma unroll
        for (int e = 2 * r; e < 2 * r + 2; ++e) {
          s[nt][e] = exp2(s[nt][e] * scale_log2 - ref);
          l[r] += s[nt][e];
        }
    }
  }

  template <int D>
  __device__ __forceinline__ static void rescale_rows(float (&o)[D / 8][4], const float (&rescale)[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) o[dt][2 * r] *= rescale[r], o[dt][2 * r + 1] *= rescale[r];
  }

  // exponentiate, then the output so far rescaled at once.
  template <int N, int D, class Exp2>
  __device__ __forceinline__ void stage(float (&s)[N / 8][4], float (&o)[D / 8][4], const Fragment& f, bool edge,
                                        int window, float scale_log2, Exp2 exp2) {
    float rescale[2];
    exponentiate<N>(s, f, edge, window, scale_log2, exp2, rescale);
    rescale_rows<D>(o, rescale);
  }

  // Writes each row's log-sum-exp (natural log; rows at or past `limit` skipped) into
  // lse [T, heads] and divides o by the row sums, which differ between the lane's rows.
  template <int D>
  __device__ __forceinline__ void finish(float (&o)[D / 8][4], const Fragment& f, int limit, int64_t doc_start,
                                         int heads, int head, float* lse) {
    float inv[2];
    for (int r = 0; r < 2; ++r) {
      l[r] = quad_sum(l[r]);
      inv[r] = 1.0f / l[r];
      const int i = f.row(2 * r);
      if (i < limit && threadIdx.x % 4 == 0) lse[(doc_start + i) * heads + head] = (m[r] + log2f(l[r])) * kLn2;
    }
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[dt][e] *= inv[e / 2];
  }
};

// IEEE exp2 for the portable kernels.
struct Exp2Ieee {
  __device__ __forceinline__ float operator()(float x) const { return exp2f(x); }
};

// Stores this lane's two rows (r = 0: row g, r = 1: row g + 8) of a 16 x D accumulator
// tile times `scale` into rows of a [T, heads, D] tensor of T (bf16, f16 or f32
// partials); rows at or past `limit` are skipped.
template <class T, int D>
__device__ __forceinline__ void store_rows(const float (&acc)[D / 8][4], const Fragment& f,
                                           float scale, int limit, int64_t doc_start, int heads,
                                           int head, T* dst) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = f.row(2 * r);
    if (i >= limit) continue;
    T* row = dst + ((doc_start + i) * heads + head) * static_cast<int64_t>(D);
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      const float lo = acc[dt][2 * r] * scale, hi = acc[dt][2 * r + 1] * scale;
      if constexpr (__is_same(T, float))
        *reinterpret_cast<float2*>(row + f.col(dt, 0)) = make_float2(lo, hi);
      else
        *reinterpret_cast<uint32_t*>(row + f.col(dt, 0)) = pack2<T>(lo, hi);
    }
  }
}

// The pointers of one backward call; dk_heads and dv_heads are [T, heads, D] fp32
// per-query-head partials under GQA (else null), which the dK/dV kernels write in
// place of dk and dv.
template <class T>
struct BackwardArgs {
  const T *q, *k, *v, *dout;
  const float *lse, *delta;
  T *dq, *dk, *dv;
  float *dk_heads, *dv_heads;  // [T, heads, D] per-query-head partials (GQA), else null
};

// A dK/dV kernel's two accumulators for its rows (fragment f, rows at or past `limit`
// skipped): dK times the softmax scale. Without GQA into dk and dv at KV head kvh; with
// it into the fp32 partials of query head h.
template <class T, int D>
__device__ __forceinline__ void store_dkdv(const float (&dk)[D / 8][4], const float (&dv)[D / 8][4],
                                           const Fragment& f, const Layout& g, int limit, int64_t doc_start,
                                           int kvh, int h, const BackwardArgs<T>& a) {
  if (g.heads == g.kv_heads) {
    store_rows<T, D>(dk, f, g.scale, limit, doc_start, g.kv_heads, kvh, a.dk);
    store_rows<T, D>(dv, f, 1.0f, limit, doc_start, g.kv_heads, kvh, a.dv);
  } else {
    store_rows<float, D>(dk, f, g.scale, limit, doc_start, g.heads, h, a.dk_heads);
    store_rows<float, D>(dv, f, 1.0f, limit, doc_start, g.heads, h, a.dv_heads);
  }
}

// dk[t, j] = sum over the query heads h of KV head j, in head order, of the partials,
// rounded once; two columns per thread.
template <class T>
__global__ void sum_group_kernel(const float* heads_part, int64_t tokens, int heads, int kv_heads, int dim,
                                 T* out) {
  const int group = heads / kv_heads, pairs = dim / 2;
  const int64_t items = tokens * kv_heads * pairs;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < items;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / (kv_heads * pairs);
    const int j = static_cast<int>(i / pairs % kv_heads), c = static_cast<int>(i % pairs) * 2;
    float2 s = make_float2(0.0f, 0.0f);
    for (int h = j * group; h < (j + 1) * group; ++h) {
      const float2 x = *reinterpret_cast<const float2*>(heads_part + (t * heads + h) * dim + c);
      s.x += x.x;
      s.y += x.y;
    }
    *reinterpret_cast<uint32_t*>(out + (t * kv_heads + j) * dim + c) = pack2<T>(s.x, s.y);
  }
}

// Runs launch(args) (the dQ and dK/dV kernels of one family) with the GQA partials
// allocated when heads != kv_heads, then adds the partials into dk and dv in head order.
template <class T, int D, class Launch>
void with_backward_args(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& lse,
                        const Tensor& delta, const Layout& g, Tensor& dq, Tensor& dk, Tensor& dv, const char* op,
                        Launch&& launch) {
  const int64_t tokens = q.size(0);
  const bool grouped = g.heads != g.kv_heads;
  Tensor dk_heads, dv_heads;
  if (grouped) {
    dk_heads = Tensor::empty({tokens, g.heads, D}, DType::f32, q.device());
    dv_heads = Tensor::empty({tokens, g.heads, D}, DType::f32, q.device());
  }
  const auto f32 = [](Tensor& t) { return t.defined() ? static_cast<float*>(t.raw()) : nullptr; };
  launch(BackwardArgs<T>{static_cast<const T*>(q.raw()), static_cast<const T*>(k.raw()),
                         static_cast<const T*>(v.raw()), static_cast<const T*>(dout.raw()),
                         static_cast<const float*>(lse.raw()), static_cast<const float*>(delta.raw()),
                         static_cast<T*>(dq.raw()), static_cast<T*>(dk.raw()), static_cast<T*>(dv.raw()),
                         f32(dk_heads), f32(dv_heads)});
  if (!grouped) return;
  const unsigned blocks = grid_for(tokens * g.kv_heads * D / 2, 256);
  sum_group_kernel<T><<<blocks, 256, 0, current_stream()>>>(f32(dk_heads), tokens, g.heads, g.kv_heads, D,
                                                             static_cast<T*>(dk.raw()));
  sum_group_kernel<T><<<blocks, 256, 0, current_stream()>>>(f32(dv_heads), tokens, g.heads, g.kv_heads, D,
                                                             static_cast<T*>(dv.raw()));
  check_launch(op, k.shape());
}

// Calls fn.template operator()<T, D>() for q's element type (bf16 or f16) and head dim
// (64 or 128); `supports` has admitted the pair.
template <class Fn>
void with_types(const Tensor& q, const char* op, Fn&& fn) {
  const auto by_dim = [&]<class T>() {
    if (q.size(2) == 64) fn.template operator()<T, 64>();
    else fn.template operator()<T, 128>();
  };
  if (q.dtype() == DType::bf16) by_dim.template operator()<__nv_bfloat16>();
  else if (q.dtype() == DType::f16) by_dim.template operator()<__half>();
  else fail(op, ": the tensor-core path takes bf16 or f16, got ", dtype_name(q.dtype()));
}

}  // namespace amber::cuda::tensor_core
