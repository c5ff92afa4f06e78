// Tensor-core attention backward (bf16/f16, head_dim 64 and 128), deterministic: the
// dQ kernel owns 64 query rows of one head and walks their keys; the dK/dV kernel owns
// 64 keys and one query head and walks that head's queries. Each recomputes
// P = exp(scale q.k - lse) from the saved log-sum-exp, so no output is ever shared
// between blocks and no atomics are needed; the price is that the scores and dP are
// computed twice (7 products instead of 5). Under GQA the dK/dV blocks of one KV
// head's query heads write fp32 partials, added afterwards in head order: one block
// per query head keeps the grid as wide as the dQ kernel's, where one block walking
// the whole group serially left most SMs idle at the end.
#include "amber/core/stream.h"
#include "amber/ops/cuda/attention/attention_tc.cuh"

namespace amber::cuda::tensor_core {
namespace {

constexpr int kWarps = 4, kThreads = 32 * kWarps, kOwnedRows = 16 * kWarps;

template <int D>
struct DqShape {
  static constexpr int kKeys = 64, S = stride_of<D>();
  static constexpr int kOwnElems = kOwnedRows * S, kKVElems = kKeys * S;
  static constexpr int kSmemElems = 2 * kOwnElems + 4 * kKVElems;  // q, dout, k[2], v[2]
};

// dQ = scale * sum_j dS_ij k_j with dS = P (dP - delta), dP = dout . v.
template <class T, int D>
__global__ void __launch_bounds__(kThreads) dq_kernel(Layout g, BackwardArgs<T> a) {
  using F = DqShape<D>;
  constexpr int S = F::S, kKeys = F::kKeys;
  extern __shared__ uint4 smem16[];
  T* sq = reinterpret_cast<T*>(smem16);
  T* sdo = sq + F::kOwnElems;
  T* sk = sdo + F::kOwnElems;    // two stages
  T* sv = sk + 2 * F::kKVElems;  // two stages
  TileRange t;
  if (!tile_of(g, true, t)) return;
  const int h = blockIdx.y, kvh = h / (g.heads / g.kv_heads), warp = threadIdx.x / 32;
  const int tile_end = t.begin + t.rows;
  const int key_begin = first_key(t.begin, g.window) / kKeys * kKeys;
  const int stages = (tile_end - key_begin + kKeys - 1) / kKeys;
  const auto load_stage = [&](int stage) {
    const int kt = key_begin + stage * kKeys, buf = stage % 2;
    async_rows<T, D, kThreads>(a.k, t.doc_start, kt, kKeys, tile_end, g.kv_heads, kvh, sk + buf * F::kKVElems);
    async_rows<T, D, kThreads>(a.v, t.doc_start, kt, kKeys, tile_end, g.kv_heads, kvh, sv + buf * F::kKVElems);
  };
  async_rows<T, D, kThreads>(a.q, t.doc_start, t.begin, kOwnedRows, tile_end, g.heads, h, sq);
  async_rows<T, D, kThreads>(a.dout, t.doc_start, t.begin, kOwnedRows, tile_end, g.heads, h, sdo);
  load_stage(0);
  cp_async_commit();

  const float scale_log2 = g.scale * kLog2e;
  float lse[2], delta[2];
  for (int r = 0; r < 2; ++r) {
    const int i = min(t.begin + warp * 16 + (threadIdx.x % 32) / 4 + r * 8, tile_end - 1);
    const int64_t stat = (t.doc_start + i) * g.heads + h;
    lse[r] = a.lse[stat] * kLog2e;
    delta[r] = a.delta[stat];
  }
  float dq[D / 8][4] = {};
  uint32_t qa[D / 16][4], da[D / 16][4];  // this warp's q and dout, read once
  for (int stage = 0; stage < stages; ++stage) {
    next_stage(stage, stages, load_stage);
    if (stage == 0) {
      load_a<T, D, S>(qa, sq + warp * 16 * S);
      load_a<T, D, S>(da, sdo + warp * 16 * S);
    }
    const int kt = key_begin + stage * kKeys, buf = stage % 2;
    const T* k_tile = sk + buf * F::kKVElems;
    float s[kKeys / 8][4] = {}, dp[kKeys / 8][4] = {};
    warp_abt<T, D, kKeys, S>(s, qa, k_tile);
    warp_abt<T, D, kKeys, S>(dp, da, sv + buf * F::kKVElems);
    const Fragment f{t.begin + warp * 16, kt};
    const bool edge = kt + kKeys - 1 > t.begin || (g.window > 0 && kt <= tile_end - g.window);
#pragma unroll
    for (int nt = 0; nt < kKeys / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const bool seen = !edge || visible(f.row(e), f.col(nt, e), g.window);
        const float p = seen ? exp2f(s[nt][e] * scale_log2 - lse[e / 2]) : 0.0f;
        s[nt][e] = p * (dp[nt][e] - delta[e / 2]);  // dS, in place of the scores
      }
    warp_pb<T, kKeys, D, S>(dq, s, k_tile);
    __syncthreads();  // the next stage's load overwrites this buffer
  }
  store_rows<T, D>(dq, Fragment{t.begin + warp * 16, 0}, g.scale, tile_end, t.doc_start,
                   g.heads, h, a.dq);
}

template <int D>
struct DkdvShape {
  // Fewer queries per stage at d128 keeps dK, dV, S and dP within the register file.
  static constexpr int kQueries = D == 128 ? 32 : 64, S = stride_of<D>();
  static constexpr int kOwnElems = kOwnedRows * S, kQElems = kQueries * S;
  // k, v, then q[2], dout[2] (elements of T), then lse[2], delta[2] (floats).
  static constexpr int kSmemElems = 2 * kOwnElems + 4 * kQElems;
};

template <class T, int D>
constexpr size_t dkdv_smem_bytes() {
  return DkdvShape<D>::kSmemElems * sizeof(T) + 4 * DkdvShape<D>::kQueries * sizeof(float);
}

// dV = sum_i P_ij dout_i and dK = scale * sum_i dS_ij q_i over the queries of one head,
// computed transposed (keys as rows) so each warp owns 16 keys.
template <class T, int D>
__global__ void __launch_bounds__(kThreads) dkdv_kernel(Layout g, BackwardArgs<T> a) {
  using F = DkdvShape<D>;
  constexpr int S = F::S, kQueries = F::kQueries;
  extern __shared__ uint4 smem16[];
  T* sk = reinterpret_cast<T*>(smem16);
  T* sv = sk + F::kOwnElems;
  T* sq = sv + F::kOwnElems;        // two stages
  T* sdo = sq + 2 * F::kQElems;     // two stages
  float* slse = reinterpret_cast<float*>(sdo + 2 * F::kQElems);  // two stages, log2 units
  float* sdelta = slse + 2 * kQueries;                            // two stages
  TileRange t;
  if (!tile_of(g, false, t)) return;
  const int h = blockIdx.y, group = g.heads / g.kv_heads, kvh = h / group, warp = threadIdx.x / 32;
  const int tile_end = t.begin + t.rows;
  // Query i sees key j iff j <= i < j + window: queries from the tile's first key to
  // the last key's window end.
  const int query_end = g.window > 0 ? min(t.length, tile_end - 1 + g.window) : t.length;
  const int stages = (query_end - t.begin + kQueries - 1) / kQueries;  // one per query tile
  const auto load_stage = [&](int stage) {
    const int buf = stage % 2, qt = t.begin + stage * kQueries;
    async_rows<T, D, kThreads>(a.q, t.doc_start, qt, kQueries, query_end, g.heads, h, sq + buf * F::kQElems);
    async_rows<T, D, kThreads>(a.dout, t.doc_start, qt, kQueries, query_end, g.heads, h, sdo + buf * F::kQElems);
    if (threadIdx.x < kQueries) {
      const int64_t stat = (t.doc_start + min(qt + static_cast<int>(threadIdx.x), query_end - 1)) * g.heads + h;
      slse[buf * kQueries + threadIdx.x] = a.lse[stat] * kLog2e;
      sdelta[buf * kQueries + threadIdx.x] = a.delta[stat];
    }
  };
  async_rows<T, D, kThreads>(a.k, t.doc_start, t.begin, kOwnedRows, tile_end, g.kv_heads, kvh, sk);
  async_rows<T, D, kThreads>(a.v, t.doc_start, t.begin, kOwnedRows, tile_end, g.kv_heads, kvh, sv);
  load_stage(0);
  cp_async_commit();

  const float scale_log2 = g.scale * kLog2e;
  float dk[D / 8][4] = {}, dv[D / 8][4] = {};
  // At d64 the warp's keys and values stay in registers; at d128 they would not fit
  // next to dK and dV, and are read from shared memory every stage.
  constexpr bool kHoldKV = D == 64;
  uint32_t ka[kHoldKV ? D / 16 : 1][4], va[kHoldKV ? D / 16 : 1][4];
  for (int stage = 0; stage < stages; ++stage) {
    next_stage(stage, stages, load_stage);
    const int qt = t.begin + stage * kQueries, buf = stage % 2;
    const T* q_tile = sq + buf * F::kQElems;
    const T* do_tile = sdo + buf * F::kQElems;
    const float* lse = slse + buf * kQueries;
    const float* delta = sdelta + buf * kQueries;
    float st[kQueries / 8][4] = {}, dpt[kQueries / 8][4] = {};  // keys x queries
    if constexpr (kHoldKV) {
      if (stage == 0) {
        load_a<T, D, S>(ka, sk + warp * 16 * S);
        load_a<T, D, S>(va, sv + warp * 16 * S);
      }
      warp_abt<T, D, kQueries, S>(st, ka, q_tile);
      warp_abt<T, D, kQueries, S>(dpt, va, do_tile);
    } else {
      warp_abt<T, D, kQueries, S>(st, sk + warp * 16 * S, q_tile);
      warp_abt<T, D, kQueries, S>(dpt, sv + warp * 16 * S, do_tile);
    }
    const Fragment f{t.begin + warp * 16, qt};  // rows are keys j, columns queries i
    const bool edge = qt < tile_end || qt + kQueries > query_end ||
                      (g.window > 0 && qt + kQueries - 1 >= t.begin + g.window);
#pragma unroll
    for (int nt = 0; nt < kQueries / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = f.col(nt, e), c = i - qt;
        const bool seen = !edge || (i < query_end && visible(i, f.row(e), g.window));
        const float p = seen ? exp2f(st[nt][e] * scale_log2 - lse[c]) : 0.0f;
        dpt[nt][e] = p * (dpt[nt][e] - delta[c]);  // dS^T
        st[nt][e] = p;                             // P^T
      }
    warp_pb<T, kQueries, D, S>(dv, st, do_tile);
    warp_pb<T, kQueries, D, S>(dk, dpt, q_tile);
    __syncthreads();  // the next stage's load overwrites this buffer
  }
  store_dkdv<T, D>(dk, dv, Fragment{t.begin + warp * 16, 0}, g, tile_end, t.doc_start, kvh, h, a);
}

}  // namespace

void backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
              const Tensor& lse, const Tensor& delta, const Layout& unplanned, DerivedTensors& plans,
              Tensor& dq, Tensor& dk, Tensor& dv) {
  const char* op = "attention_backward";
  const Layout g = with_tile_plan(unplanned, kOwnedRows, false, q.device(), plans, op);
  with_types(q, op, [&]<class T, int D>() {
    with_backward_args<T, D>(dout, q, k, v, lse, delta, g, dq, dk, dv, op, [&](const BackwardArgs<T>& args) {
      const size_t dq_smem = DqShape<D>::kSmemElems * sizeof(T);
      allow_smem(reinterpret_cast<const void*>(dq_kernel<T, D>), dq_smem, op);
      dq_kernel<T, D><<<attention_grid(g, g.heads, op), kThreads, dq_smem, current_stream()>>>(g,
                                                                                                          args);
      check_launch(op, q.shape());
      const size_t dkdv_smem = dkdv_smem_bytes<T, D>();
      allow_smem(reinterpret_cast<const void*>(dkdv_kernel<T, D>), dkdv_smem, op);
      dkdv_kernel<T, D><<<attention_grid(g, g.heads, op), kThreads, dkdv_smem, current_stream()>>>(
          g, args);
      check_launch(op, k.shape());
    });
  });
}

}  // namespace amber::cuda::tensor_core
