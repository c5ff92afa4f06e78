// Hopper attention backward (sm_90a; bf16/f16, head_dim 64 and 128), deterministic, in
// the portable path's two kernels (attention_tc_backward.cu says why): the dQ kernel
// owns 128 query rows of one head (Q and dO) and streams K and V; the dK/dV kernel owns
// 128 keys (K and V) for one query head and streams Q, dO and their row statistics.
// Both recompute P = exp2(scale q.k - lse) from the saved log-sum-exp. Every product is
// a wgmma: the scores and dP from shared memory, the accumulations (dS K; P^T dO and
// dS^T Q) with P or dS from registers and the streamed tile read MN-major.
#include "amber/ops/cuda/attention_hopper.cuh"

namespace amber::cuda::hopper {
namespace {

using tensor_core::BackwardArgs;
using tensor_core::Fragment;
using tensor_core::kLog2e;
using tensor_core::store_rows;

// Rows per streamed stage: 128 keys for the dQ kernel; the dK/dV kernel holds two
// accumulators (dK, dV) and spills beyond 64 queries.
constexpr int kDqKeys = 128, kDkdvQueries = 64;
constexpr int kStatBytes = 2 * kDkdvQueries * 4;  // lse and delta per streamed query

template <int D>
using DqRing = Ring<D, 2, kDqKeys, ring_stages<D, 2, kDqKeys>()>;
template <int D>
using DkdvRing = Ring<D, 2, kDkdvQueries, ring_stages<D, 2, kDkdvQueries, kStatBytes>(), kStatBytes>;

// dQ = scale * sum_j dS_ij k_j with dS = P (dP - delta), dP = dout . v.
template <class T, int D>
__global__ void __launch_bounds__(kThreads, 1) dq_kernel(const __grid_constant__ Maps maps, Layout g,
                                                         BackwardArgs<T> a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kKeys = kDqKeys;
  using R = DqRing<D>;
  extern __shared__ uint8_t smem_raw[];
  const R ring(smem_raw);
  TileRange t;
  if (!tile_of(g, true, t)) return;
  const int h = blockIdx.y, kvh = h / (g.heads / g.kv_heads);
  const int tile_end = t.begin + t.rows;
  const int key_begin = first_key(t.begin, g.window) / kKeys * kKeys;
  const int stages = (tile_end - key_begin + kKeys - 1) / kKeys;
  ring.init(0);
  if (!ring.consumer(maps, h, t.doc_start + t.begin, kvh, t.doc_start + key_begin, stages)) return;
  const int consumer = threadIdx.x / 128 - 1, warp = (threadIdx.x / 32) % 4;
  const int rows_begin = t.begin + 64 * consumer, rows_end = min(rows_begin + 64, tile_end);
  const Fragment f0{rows_begin + 16 * warp, 0};
  const float scale_log2 = g.scale * kLog2e;
  float lse[2], delta[2];
  for (int r = 0; r < 2; ++r) {
    const int64_t stat = (t.doc_start + min(f0.row(2 * r), tile_end - 1)) * g.heads + h;
    lse[r] = a.lse[stat] * kLog2e;
    delta[r] = a.delta[stat];
  }
  float dq[D / 8][4] = {};
  const uint64_t q_desc = k_major(ring.own(0) + consumer * 64 * 128);  // 64 rows into each panel
  const uint64_t do_desc = k_major(ring.own(1) + consumer * 64 * 128);
  barrier_wait(ring.own_full(), 0);
  for (int stage = 0; stage < stages; ++stage) {
    const int kt = key_begin + stage * kKeys;
    const bool needed = rows_begin < rows_end && kt < rows_end &&
                        (g.window == 0 || kt + kKeys - 1 >= first_key(rows_begin, g.window));
    barrier_wait(ring.full(stage), R::parity(stage));
    if (needed) {
      // dP's product runs while P is computed from the scores.
      float s[kKeys / 8][4], dp[kKeys / 8][4];
      product_abt<T, D, kKeys, R::kOwnPanelBytes, R::kStreamPanelBytes>(s, q_desc, k_major(ring.stream(stage, 0)));
      wgmma_commit();
      product_abt<T, D, kKeys, R::kOwnPanelBytes, R::kStreamPanelBytes>(dp, do_desc, k_major(ring.stream(stage, 1)));
      wgmma_commit();
      wgmma_wait<1>();
      pin(s);
      const Fragment f{f0.row0, kt};
      const bool edge = kt + kKeys - 1 > rows_begin || (g.window > 0 && kt <= rows_end - g.window);
#pragma unroll
      for (int nt = 0; nt < kKeys / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const bool seen = !edge || visible(f.row(e), f.col(nt, e), g.window);
          s[nt][e] = seen ? exp2_fast(s[nt][e] * scale_log2 - lse[e / 2]) : 0.0f;
        }
      wgmma_wait<0>();
      pin(dp);
#pragma unroll
      for (int nt = 0; nt < kKeys / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[nt][e] *= dp[nt][e] - delta[e / 2];  // dS, in place of P
      product_pb<T, kKeys, D>(dq, s, mn_major(ring.stream(stage, 0), R::kStreamPanelBytes));
      complete(dq);
    }
    if (threadIdx.x % 32 == 0) barrier_arrive(ring.empty(stage));
  }
  if (rows_begin < rows_end) store_rows<T, D>(dq, f0, g.scale, tile_end, t.doc_start, g.heads, h, a.dq);
#endif
}

// dV = sum_i P_ij dout_i and dK = scale * sum_i dS_ij q_i over the queries of one head,
// computed transposed (keys as rows). Warp 1 of the producer warpgroup copies each
// stage's lse (in log2 units) and delta into the ring beside its tiles.
template <class T, int D>
__global__ void __launch_bounds__(kThreads, 1) dkdv_kernel(const __grid_constant__ Maps maps, Layout g,
                                                           BackwardArgs<T> a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kQueries = kDkdvQueries;
  using R = DkdvRing<D>;
  extern __shared__ uint8_t smem_raw[];
  const R ring(smem_raw);
  TileRange t;
  if (!tile_of(g, false, t)) return;
  const int h = blockIdx.y, group = g.heads / g.kv_heads, kvh = h / group, role = threadIdx.x / 128;
  const int tile_end = t.begin + t.rows;
  // Query i sees key j iff j <= i < j + window: queries from the tile's first key to
  // the last key's window end.
  const int query_end = g.window > 0 ? min(t.length, tile_end - 1 + g.window) : t.length;
  const int stages = (query_end - t.begin + kQueries - 1) / kQueries;
  ring.init(32);
  if (role == 0) {
    release_registers<24>();
    const int row0 = static_cast<int>(t.doc_start), warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (threadIdx.x == 0) ring.produce(maps, kvh, row0 + t.begin, h, row0 + t.begin, stages);
    if (warp != 1) return;
    for (int stage = 0; stage < stages; ++stage) {
      ring.wait_free(stage);
      float* stats = reinterpret_cast<float*>(ring.extra(stage));
      for (int c = lane; c < kQueries; c += 32) {
        const int64_t stat = (t.doc_start + min(t.begin + stage * kQueries + c, query_end - 1)) * g.heads + h;
        stats[c] = a.lse[stat] * kLog2e;
        stats[kQueries + c] = a.delta[stat];
      }
      barrier_arrive(ring.full(stage));
    }
    return;
  }

  claim_registers<240>();
  const int consumer = role - 1, warp = (threadIdx.x / 32) % 4;
  const int keys_begin = t.begin + 64 * consumer, keys_end = min(keys_begin + 64, tile_end);
  const Fragment f0{keys_begin + 16 * warp, 0};  // rows are keys j, columns queries i
  const float scale_log2 = g.scale * kLog2e;
  float dk[D / 8][4] = {}, dv[D / 8][4] = {};
  const uint64_t k_desc = k_major(ring.own(0) + consumer * 64 * 128);
  const uint64_t v_desc = k_major(ring.own(1) + consumer * 64 * 128);
  barrier_wait(ring.own_full(), 0);
  for (int stage = 0; stage < stages; ++stage) {
    const int qt = t.begin + stage * kQueries;
    const bool needed = keys_begin < keys_end && qt + kQueries - 1 >= keys_begin &&
                        (g.window == 0 || qt <= keys_end - 2 + g.window);
    barrier_wait(ring.full(stage), R::parity(stage));
    if (needed) {
      const float* lse = reinterpret_cast<const float*>(ring.extra(stage));
      const float* delta = lse + kQueries;
      // Products overlap the arithmetic: dP^T runs while P^T is computed, and dV's
      // accumulation while dS^T is.
      float st[kQueries / 8][4], dpt[kQueries / 8][4];  // keys x queries
      product_abt<T, D, kQueries, R::kOwnPanelBytes, R::kStreamPanelBytes>(st, k_desc, k_major(ring.stream(stage, 0)));
      wgmma_commit();
      product_abt<T, D, kQueries, R::kOwnPanelBytes, R::kStreamPanelBytes>(dpt, v_desc, k_major(ring.stream(stage, 1)));
      wgmma_commit();
      wgmma_wait<1>();
      pin(st);
      const Fragment f{f0.row0, qt};
      const bool edge = qt < keys_end || qt + kQueries > query_end ||
                        (g.window > 0 && qt + kQueries - 1 >= keys_begin + g.window);
#pragma unroll
      for (int nt = 0; nt < kQueries / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = f.col(nt, e);
          const bool seen = !edge || (i < query_end && visible(i, f.row(e), g.window));
          st[nt][e] = seen ? exp2_fast(st[nt][e] * scale_log2 - lse[i - qt]) : 0.0f;  // P^T
        }
      product_pb<T, kQueries, D>(dv, st, mn_major(ring.stream(stage, 1), R::kStreamPanelBytes));
      wgmma_commit();
      wgmma_wait<1>();
      pin(dpt);
#pragma unroll
      for (int nt = 0; nt < kQueries / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) dpt[nt][e] = st[nt][e] * (dpt[nt][e] - delta[f.col(nt, e) - qt]);  // dS^T
      product_pb<T, kQueries, D>(dk, dpt, mn_major(ring.stream(stage, 0), R::kStreamPanelBytes));
      complete(dv, dk);
    }
    if (threadIdx.x % 32 == 0) barrier_arrive(ring.empty(stage));
  }
  if (keys_begin >= keys_end) return;
  if (group == 1) {
    store_rows<T, D>(dk, f0, g.scale, tile_end, t.doc_start, g.kv_heads, kvh, a.dk);
    store_rows<T, D>(dv, f0, 1.0f, tile_end, t.doc_start, g.kv_heads, kvh, a.dv);
  } else {
    store_rows<float, D>(dk, f0, g.scale, tile_end, t.doc_start, g.heads, h, a.dk_heads);
    store_rows<float, D>(dv, f0, 1.0f, tile_end, t.doc_start, g.heads, h, a.dv_heads);
  }
#endif
}

}  // namespace

void backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& lse,
              const Tensor& delta, const Layout& unplanned, Tensor& dq, Tensor& dk, Tensor& dv) {
  const char* op = "attention_backward";
  Tensor plan;
  const Layout g = with_tile_plan(unplanned, kOwnRows, q.device(), plan, op);
  tensor_core::with_types(q, op, [&]<class T, int D>() {
    tensor_core::with_backward_args<T, D>(
        dout, q, k, v, lse, delta, g, dq, dk, dv, op, [&](const BackwardArgs<T>& args) {
          const dim3 grid = attention_grid(g, g.heads, op);
          constexpr int dq_smem = DqRing<D>::kSmemBytes;
          allow_smem(reinterpret_cast<const void*>(dq_kernel<T, D>), dq_smem, op);
          dq_kernel<T, D><<<grid, kThreads, dq_smem, cudaStreamPerThread>>>(
              make_maps<2>(q, dout, k, v, kDqKeys, op), g, args);
          check_launch(op, q.shape());
          constexpr int dkdv_smem = DkdvRing<D>::kSmemBytes;
          allow_smem(reinterpret_cast<const void*>(dkdv_kernel<T, D>), dkdv_smem, op);
          dkdv_kernel<T, D><<<grid, kThreads, dkdv_smem, cudaStreamPerThread>>>(
              make_maps<2>(k, v, q, dout, kDkdvQueries, op), g, args);
          check_launch(op, k.shape());
        });
  });
}

}  // namespace amber::cuda::hopper
