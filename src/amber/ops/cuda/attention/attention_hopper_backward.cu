// Hopper attention backward (sm_90a; bf16/f16, head_dim 64 and 128), deterministic.
// The dK/dV kernel's persistent blocks take work items (WorkList): an item owns 128
// keys (K and V) and streams Q, dO and their row statistics in stages of queries, for
// one query head or, near a document's end, for every query head of its KV head in
// turn. At head_dim 64 it also computes dQ (a
// fifth product per stage, summed across key tiles in a fixed order; see OrderedSums); at
// 128 a separate dQ kernel owns 128 query rows (Q and dO) and streams K and V, as the
// portable path does (attention_tc_backward.cu). Both recompute P = exp2(scale q.k -
// lse) from the saved log-sum-exp. Every product is a wgmma: the scores and dP from
// shared memory, the accumulations (dS K; P^T dO and dS^T Q) with P or dS from
// registers and the streamed tile read MN-major, and the folded dQ with both operands
// in shared memory.
#include <algorithm>

#include "amber/core/stream.h"
#include "amber/ops/cuda/attention/attention_hopper.cuh"
#include "amber/ops/cuda/common/ordered_sum.cuh"
#include "amber/ops/cuda/rope/rope.h"

namespace amber::cuda::hopper {
namespace {

using tensor_core::BackwardArgs;
using tensor_core::Fragment;
using tensor_core::kLog2e;
using tensor_core::store_rows;
using tensor_core::VisibleSpan;

// Rows per streamed stage: 128 keys for the dQ kernel. The dK/dV kernel streams 128
// queries at head_dim 64 (with dQ folded in, whose product takes the stage's 128) and
// 64 at 128, where its dK and dV accumulators are twice as large and more queries
// spill. Its score products take 64 queries at a time (64 x 64 wgmmas): a stage at
// head_dim 64 is two pieces.
constexpr int kDqKeys = 128;
template <bool kDq>
constexpr int kDkdvQueries = kDq ? 128 : 64;
constexpr int kPieceQueries = 64;
template <bool kDq>
constexpr int kStatBytes = 2 * kDkdvQueries<kDq> * 4;  // lse and delta per streamed query

// Which key tiles take all the query heads of their KV head in one work item (WorkList:
// one K/V load, no ordered dK/dV sum between the heads): those whose heads stream at
// most kGroupedTileHeads (tile, head) pairs of work, and at head_dim 64 the last three
// quarters of a document's tiles, up to kMostGroupedTiles. Measured on the H200
// (docs/perf/attention.md, 9383213): grouping 12 of a 2048-token document's 16 tiles
// ran shape A 4% faster than 4, and all 16 6% slower; documents of 50-600 tokens and
// shape B (head_dim 128) ran best with 20 pairs alone.
constexpr int kGroupedTileHeads = 20;
constexpr int kMostGroupedTiles = 16;
template <int D>
GroupedTiles grouped_tiles(const Layout& g) {
  return {kGroupedTileHeads / (g.heads / g.kv_heads), D == 64 ? 3 : 0, kMostGroupedTiles};
}

template <int D>
using DqRing = Ring<D, 2, kDqKeys, ring_stages<D, 2, kDqKeys>()>;

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
      const bool edge = kt + kKeys - 1 > rows_begin || (g.window > 0 && kt <= rows_end - g.window);
#pragma unroll
      for (int nt = 0; nt < kKeys / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[nt][e] = exp2_fast(s[nt][e] * scale_log2 - lse[e / 2]);
      if (edge) {
        const VisibleSpan seen = VisibleSpan::keys_of_queries(Fragment{f0.row0, kt}, g.window);
#pragma unroll
        for (int nt = 0; nt < kKeys / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (!seen.has(nt, e)) s[nt][e] = 0.0f;
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

// Head dim 64 folds dQ into the dK/dV kernel: a fifth product per stage, dQ of the
// stage's queries over the block's 128 keys = dS K. Both consumers write their dS^T
// rows (their 64 keys x the stage's 128 queries) into a shared tile, meet, and each
// computes dQ for 64 of the queries; each fp32 dQ tile goes to a writer thread, which
// stores it (the first key tile of those queries) or adds it (every later one) into
// OrderedSums by bulk copy. Determinism: the key tiles of one 64-query piece add in a fixed
// order, from the diagonal tile down, each waiting on the piece's counter for the
// tiles before it. Work items are drawn in ticket order (WorkList: a document's last
// tile first), so an item waits only on items drawn before it, which running blocks
// hold (no deadlock), and with queries streamed upwards the tile it waits on reached
// the stage a stage or more earlier.
//
// Under GQA the query heads of one KV head add their dK and dV the same way, into
// fp32 sums [kv_heads, T, D] in head order (add_dkdv), so no per-head partials travel
// through memory; an item that takes all of a KV head's query heads has final dK and
// dV, which it stores in T itself, marking its keys' tokens (final_kv) so that the
// conversion pass leaves them alone.
struct OrderedSums {
  float* dq;        // [heads, T, 64] when dQ is folded in, else null
  float *dk, *dv;   // [kv_heads, T, D] under GQA, else null
  int* counters;    // zeroed: the ticket, then one per (64-query piece's first row,
                    // head), then one per (key tile's first row, KV head), then under GQA
                    // one per token: 1 where a grouped item stored dK and dV final
  __device__ int* dq_counter(const Layout& g, int64_t row, int h) const { return counters + 1 + row * g.heads + h; }
  __device__ int* kv_counter(const Layout& g, int64_t row, int kvh) const {
    return counters + 1 + g.tokens * g.heads + row * g.kv_heads + kvh;
  }
  __host__ __device__ static int64_t final_kv_offset(const Layout& g) { return 1 + g.tokens * (g.heads + g.kv_heads); }
  __device__ int* final_kv(const Layout& g, int64_t token) const { return counters + final_kv_offset(g) + token; }
};

// A dK/dV work item (WorkList): a key tile and the query heads it takes, one after
// another, each streamed in stages from the tile's first row to query_end.
struct BackwardWork {
  TileRange t;
  int head_first, head_end, kvh, query_end;
};

// The item drawn by ticket; false past the last.
__device__ __forceinline__ bool work_of(const Layout& g, const int4& item, BackwardWork& w) {
  if (item.x < 0) return false;
  w.t = tile_range(g, item.x, item.y, kOwnRows);
  w.head_first = item.z;
  w.head_end = item.z + item.w;
  w.kvh = item.z / (g.heads / g.kv_heads);
  // Query i sees key j iff j <= i < j + window: queries from the tile's first key to
  // the last key's window end.
  w.query_end = g.window > 0 ? min(w.t.length, w.t.begin + w.t.rows - 1 + g.window) : w.t.length;
  return true;
}

constexpr int kDqRows = 64;                                        // queries per consumer's dQ tile
constexpr int kDsTileBytes = kOwnRows * kDkdvQueries<true> * 2;  // dS^T, keys x queries
constexpr int kDsPanelBytes = kOwnRows * 128;                     // 64 of its queries
constexpr int kDqTileBytes = kDqRows * 64 * 4;                    // dQ, queries x 64, fp32
constexpr int kDqReserveBytes = 2 * kDsTileBytes + 2 * kDqTileBytes + 1024;

template <int D, bool kDq>
using DkdvRing =
    Ring<D, 2, kDkdvQueries<kDq>,
         ring_stages<D, 2, kDkdvQueries<kDq>, kStatBytes<kDq>, kDq ? kDqReserveBytes : 0>(), kStatBytes<kDq>>;

// The dQ tiles past the ring: two dS^T tiles (stages alternate) and two fp32 dQ tiles
// (one per consumer) and their full/empty barriers.
template <class R>
struct DqTiles {
  static constexpr int kOffset = (R::kEndOffset + 1023) / 1024 * 1024;
  uint8_t* base;
  __device__ explicit DqTiles(const R& ring) : base(ring.base + kOffset) {}
  __device__ uint8_t* ds(int stage) const { return base + (stage & 1) * kDsTileBytes; }
  __device__ float* dq(int consumer) const {
    return reinterpret_cast<float*>(base + 2 * kDsTileBytes + consumer * kDqTileBytes);
  }
  __device__ uint64_t* full(int consumer) const {
    return reinterpret_cast<uint64_t*>(base + 2 * kDsTileBytes + 2 * kDqTileBytes) + consumer;
  }
  __device__ uint64_t* empty(int consumer) const { return full(2 + consumer); }
  __device__ void init() const {
    for (int c = 0; c < kConsumers; ++c) {
      barrier_init(full(c), 128);
      barrier_init(empty(c), 1);
    }
  }
};

// A warpgroup's accumulators (fragment f, rows relative to the tile) times `scale` into
// an fp32 tile of D-float rows laid out as the ordered sum's rows from token
// first_token on.
template <int D>
__device__ __forceinline__ void store_sum_tile(float* tile, const float (&acc)[D / 8][4], const Fragment& f,
                                               int64_t first_token, float scale) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = f.row(2 * r);
    const int64_t token = first_token + row;
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt)
      *reinterpret_cast<float2*>(tile + row * D + sum_column(token, f.col(nt, 0))) =
          make_float2(acc[nt][2 * r] * scale, acc[nt][2 * r + 1] * scale);
  }
}

template <class R>
constexpr int kDqTilesSmemBytes = DqTiles<R>::kOffset + kDqReserveBytes + 1024;

// The writer thread: stage by stage of work item w (the ring's stages from `stage`
// on, which it advances), each consumer's fp32 dQ tile into the sum, in the order the
// counters keep. A stage's second piece may lie past the document's end (nothing to
// write).
template <class R>
__device__ void write_dq(const DqTiles<R>& tiles, const OrderedSums& out, const Layout& g, const BackwardWork& w,
                         int& stage) {
  const int tile = w.t.begin / kOwnRows;
  for (int h = w.head_first; h < w.head_end; ++h)
    for (int queries = w.t.begin; queries < w.query_end; queries += kDkdvQueries<true>, ++stage)
      for (int consumer = 0; consumer < kConsumers; ++consumer) {
        barrier_wait(tiles.full(consumer), stage & 1);
        const int qt = queries + consumer * kDqRows;
        if (qt >= w.t.length) {
          barrier_arrive(tiles.empty(consumer));
          continue;
        }
        const int64_t row = w.t.doc_start + qt;
        int* counter = out.dq_counter(g, row, h);
        float* dst = out.dq + (h * g.tokens + row) * 64;
        const uint32_t bytes = min(kDqRows, w.t.length - qt) * 64 * 4;
        const int diagonal = queries / kOwnRows;
        if (tile == diagonal) {
          bulk_store(dst, tiles.dq(consumer), bytes);
        } else {
          flag_wait_at_least(counter, diagonal - tile);
          bulk_add_f32(dst, tiles.dq(consumer), bytes);
        }
        bulk_commit();
        bulk_wait_read();
        barrier_arrive(tiles.empty(consumer));
        bulk_wait();
        flag_release_add(counter);
      }
}

// Writes this warpgroup's rows of dS^T (its 64 keys x the stage's queries), already
// rounded as a wgmma operand (to_operand: register 2 (nt % 2) + r of k-step nt / 2
// holds rows r of n-tile nt), into the tile: panels of 64 queries, rows of 128 bytes in
// the 128-byte swizzle.
template <int kQueries>
__device__ __forceinline__ void store_ds(uint8_t* tile, const uint32_t (&ds)[kQueries / 16][4], int first_row) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = first_row + 16 * ((threadIdx.x / 32) % 4) + lane / 4 + 8 * r;
#pragma unroll
    for (int nt = 0; nt < kQueries / 8; ++nt)
      *reinterpret_cast<uint32_t*>(tile + (nt / 8) * kDsPanelBytes + row * 128 + (((nt % 8) ^ (row % 8)) * 16) +
                                   (lane % 4) * 4) = ds[nt / 2][2 * (nt % 2) + r];
  }
}

// Under GQA, after the stage loop: the block's dK and dV (scaled, fp32) go through
// the ring's memory, which no stage uses any more, into the KV head's ordered sums;
// query head `member` of the group adds after members 0..member-1 (member 0 stores).
// Called by both consumer warpgroups; rows_first is this warpgroup's first tile row.
template <int D, class R>
__device__ void add_dkdv(const R& ring, const float (&dk)[D / 8][4], const float (&dv)[D / 8][4], int rows_first,
                         const OrderedSums& sums, const Layout& g, const TileRange& t, int kvh, int member) {
  named_sync(2, 2 * 128);  // both consumers are done reading the ring
  float* tile_k = reinterpret_cast<float*>(ring.base);
  float* tile_v = tile_k + kOwnRows * D;
  const Fragment f{rows_first + 16 * static_cast<int>((threadIdx.x / 32) % 4), 0};
  store_sum_tile<D>(tile_k, dk, f, t.doc_start + t.begin, g.scale);
  store_sum_tile<D>(tile_v, dv, f, t.doc_start + t.begin, 1.0f);
  fence_async_shared();
  named_sync(2, 2 * 128);
  if (threadIdx.x != 128) return;
  const int64_t row = t.doc_start + t.begin;
  int* counter = sums.kv_counter(g, row, kvh);
  float* dst_k = sums.dk + (kvh * g.tokens + row) * D;
  float* dst_v = sums.dv + (kvh * g.tokens + row) * D;
  const uint32_t bytes = t.rows * D * 4;
  if (member == 0) {
    bulk_store(dst_k, tile_k, bytes);
    bulk_store(dst_v, tile_v, bytes);
  } else {
    flag_wait_at_least(counter, member);
    bulk_add_f32(dst_k, tile_k, bytes);
    bulk_add_f32(dst_v, tile_v, bytes);
  }
  bulk_commit();
  bulk_wait();
  flag_release_add(counter);
}

// dV = sum_i P_ij dout_i and dK = scale * sum_i dS_ij q_i over the queries of the work
// item's heads, computed transposed (keys as rows); with kDq also dQ (above); under
// GQA added into the KV head's ordered sums (add_dkdv). One persistent block per SM
// takes work items in ticket order, one after another: thread 0 draws the next item
// while the current one runs, and the block meets (named barrier 3) between items,
// since the GQA sums go through the ring's memory. Ring, dS and dQ-tile stages count on
// across items. Warp 1 of the producer warpgroup copies each stage's lse and delta
// into the ring beside its tiles.
template <class T, int D, bool kDq>
__global__ void __launch_bounds__(kThreads, 1) dkdv_kernel(const __grid_constant__ Maps maps, Layout g,
                                                           BackwardArgs<T> a, OrderedSums sums, WorkList work) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kQueries = kDkdvQueries<kDq>;
  using R = DkdvRing<D, kDq>;
  static_assert(2 * kOwnRows * D * 4 <= R::kBarrierOffset, "add_dkdv's tiles fit in the ring's tiles");
  extern __shared__ uint8_t smem_raw[];
  __shared__ int4 published[2];  // the current and the next work item
  const R ring(smem_raw);
  const DqTiles<R> dq_tiles(ring);
  if (kDq && threadIdx.x == 0) dq_tiles.init();
  ring.init(32);
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  // The item the block takes next (thread 0 draws it), once every thread is done with
  // the one before; false past the last. The producer and consumer warpgroups run
  // separate loops, so the producer's code stays within its registers.
  const auto next = [&](int item, BackwardWork& w) {
    if (threadIdx.x == 0) {
      const int ticket = atomicAdd(sums.counters, 1);
      published[item & 1] = ticket < work.capacity ? work.items[ticket] : make_int4(-1, 0, 0, 0);
    }
    __syncwarp();
    named_sync(3, kThreads);
    return work_of(g, published[item & 1], w);
  };
  if (threadIdx.x < 128) {
    release_registers<24>();
    BackwardWork w;
    for (int item = 0, first_stage = 0; next(item, w); ++item) {
      const TileRange& t = w.t;
      int stage = first_stage;
      if (threadIdx.x == 0) {
        const int row0 = static_cast<int>(t.doc_start);
        ring.load_own(maps, w.kvh, row0 + t.begin);
        for (int h = w.head_first; h < w.head_end; ++h)
          for (int queries = t.begin; queries < w.query_end; queries += kQueries)
            ring.load_stage(maps, stage++, h, row0 + queries);
      }
      if (kDq && warp == 2 && lane == 0) write_dq(dq_tiles, sums, g, w, stage);
      if (warp == 1) {
        // Copies the warp does not wait for: a stage's loads overlap the next stages'.
        for (int h = w.head_first; h < w.head_end; ++h)
          for (int queries = t.begin; queries < w.query_end; queries += kQueries, ++stage) {
            ring.wait_free(stage);
            float* stats = reinterpret_cast<float*>(ring.extra(stage));
#pragma unroll
            for (int c = lane; c < kQueries; c += 32) {
              const int64_t stat = (t.doc_start + min(queries + c, w.query_end - 1)) * g.heads + h;
              cp_async_4(stats + c, a.lse + stat);
              cp_async_4(stats + kQueries + c, a.delta + stat);
            }
            barrier_arrive_after_copies(ring.full(stage));
          }
      }
      const int per_head = (w.query_end - t.begin + kQueries - 1) / kQueries;
      first_stage += (w.head_end - w.head_first) * per_head;
    }
    return;
  }

  claim_registers<240>();
  const int group = g.heads / g.kv_heads, consumer = threadIdx.x / 128 - 1;
  BackwardWork w;
  for (int item = 0, stage = 0; next(item, w); ++item) {
    const TileRange& t = w.t;
    const int tile_end = t.begin + t.rows;
    const int keys_begin = t.begin + 64 * consumer, keys_end = min(keys_begin + 64, tile_end);
    const Fragment f0{keys_begin + 16 * warp, 0};  // rows are keys j, columns queries i
    const float scale_log2 = g.scale * kLog2e;
    float dk[D / 8][4] = {}, dv[D / 8][4] = {};
    const uint64_t k_desc = k_major(ring.own(0) + consumer * 64 * 128);
    const uint64_t v_desc = k_major(ring.own(1) + consumer * 64 * 128);
    // With dQ folded in, the consumers take turns issuing a piece's score products (named
    // barriers 5 and 6, consumer 0 first), so one's exponentials run while the other's
    // products do (A's fwd+bwd 1.05 -> 1.01 ms). Without (head_dim 128) taking turns
    // measured slower (D 8.48 -> 8.65 ms).
    const int my_turn = 5 + consumer, other_turn = 6 - consumer;
    if (kDq && consumer == 1) named_arrive(5, 2 * 128);
    barrier_wait(ring.own_full(), item & 1);
    // Stage by stage, the heads one after another: queries is the stage's first query.
    const int per_head = (w.query_end - t.begin + kQueries - 1) / kQueries;
    const int item_end = stage + (w.head_end - w.head_first) * per_head;
    for (int queries = t.begin; stage < item_end; ++stage) {
      barrier_wait(ring.full(stage), R::parity(stage));
      // The stage's queries in pieces of 64: a piece's scores and dP^T (64 x 64) beside
      // dK, dV and the previous piece's operands still in flight fit the registers, so
      // the products stay asynchronous (whole 128-query scores would not: ptxas then
      // serialises every wgmma). Pieces past the document's end are skipped.
#pragma unroll
      for (int piece = 0; piece < kQueries / kPieceQueries; ++piece) {
        const int qt = queries + piece * kPieceQueries;
        const bool needed = keys_begin < keys_end && qt + kPieceQueries - 1 >= keys_begin && qt < w.query_end &&
                            (g.window == 0 || qt <= keys_end - 2 + g.window);
        uint32_t ds_operand[kPieceQueries / 16][4];  // dS^T (keys x queries) rounded to T
        if constexpr (kDq) named_sync(my_turn, 2 * 128);
        if (!needed) {
          if constexpr (kDq) named_arrive(other_turn, 2 * 128);
#pragma unroll
          for (int kk = 0; kk < kPieceQueries / 16; ++kk)
#pragma unroll
            for (int e = 0; e < 4; ++e) ds_operand[kk][e] = 0;
        } else {
          float st[kPieceQueries / 8][4], dpt[kPieceQueries / 8][4];
          const int rows = piece * kPieceQueries;  // the piece's first row in the stage's tiles
          const float* lse = reinterpret_cast<const float*>(ring.extra(stage)) + rows;
          const float* delta = lse + kQueries;
          const uint64_t q_rows = k_major(ring.stream(stage, 0) + rows * 128);
          const uint64_t do_rows = k_major(ring.stream(stage, 1) + rows * 128);
          // dP^T's product runs while P^T is computed, and dV's while dS^T is.
          product_abt<T, D, kPieceQueries, R::kOwnPanelBytes, R::kStreamPanelBytes>(st, k_desc, q_rows);
          wgmma_commit();
          product_abt<T, D, kPieceQueries, R::kOwnPanelBytes, R::kStreamPanelBytes>(dpt, v_desc, do_rows);
          wgmma_commit();
          if constexpr (kDq) named_arrive(other_turn, 2 * 128);
          wgmma_wait<1>();
          pin(st);
          const bool edge = qt < keys_end || qt + kPieceQueries > w.query_end ||
                            (g.window > 0 && qt + kPieceQueries - 1 >= keys_begin + g.window);
          // The statistics of the lane's first column (VisibleSpan's offsets index them).
          const int lane_column = 2 * (threadIdx.x % 4);
          lse += lane_column;
          delta += lane_column;
#pragma unroll
          for (int nt = 0; nt < kPieceQueries / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e)
              st[nt][e] = exp2_fast(st[nt][e] * scale_log2 - lse[nt * 8 + e % 2] * kLog2e);  // P^T
          if (edge) {
            const VisibleSpan seen = VisibleSpan::queries_of_keys(Fragment{f0.row0, qt}, g.window, w.query_end);
#pragma unroll
            for (int nt = 0; nt < kPieceQueries / 8; ++nt)
#pragma unroll
              for (int e = 0; e < 4; ++e)
                if (!seen.has(nt, e)) st[nt][e] = 0.0f;
          }
          product_pb<T, kPieceQueries, D>(
              dv, st, mn_step(mn_major(ring.stream(stage, 1), R::kStreamPanelBytes), rows / 16));
          wgmma_commit();
          wgmma_wait<1>();
          pin(dpt);
#pragma unroll
          for (int nt = 0; nt < kPieceQueries / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) dpt[nt][e] = st[nt][e] * (dpt[nt][e] - delta[nt * 8 + e % 2]);  // dS^T
          to_operand<T, kPieceQueries>(dpt, ds_operand);
          product_ab<T, kPieceQueries, D>(
              dk, ds_operand, mn_step(mn_major(ring.stream(stage, 0), R::kStreamPanelBytes), rows / 16));
          wgmma_commit();
        }
        // The piece's dS^T (this warpgroup's 64 keys) into its panel of the stage's tile.
        if constexpr (kDq)
          store_ds<kPieceQueries>(dq_tiles.ds(stage) + piece * kDsPanelBytes, ds_operand, 64 * consumer);
      }
      if constexpr (kDq) {
        // The consumers meet, then each computes dQ for its 64 of the stage's queries
        // over all 128 keys (rows past the document's end are not stored: the writer
        // skips them).
        fence_async_shared();
        named_sync(1, 2 * 128);
        const int dq_first = queries + consumer * kDqRows;
        float dq[D / 8][4];
        const uint64_t ds_desc = mn_major(dq_tiles.ds(stage) + consumer * kDsPanelBytes, kDsPanelBytes);
        const uint64_t k_rows = mn_major(ring.own(0), R::kOwnPanelBytes);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kOwnRows / 16; ++kk)
          mma_ss<T, D, 1, 1>(dq, mn_step(ds_desc, kk), mn_step(k_rows, kk), kk > 0);
        complete(dq);
        if (stage > 0) barrier_wait(dq_tiles.empty(consumer), (stage - 1) & 1);
        if (dq_first < t.length) {
          store_sum_tile<D>(dq_tiles.dq(consumer), dq, Fragment{16 * warp, 0}, t.doc_start + dq_first, 1.0f);
          fence_async_shared();
        }
        barrier_arrive(dq_tiles.full(consumer));
      } else {
        wgmma_wait<0>();
      }
      pin(dv);
      pin(dk);
      if (threadIdx.x % 32 == 0) barrier_arrive(ring.empty(stage));
      queries = queries + kQueries < w.query_end ? queries + kQueries : t.begin;  // the next head's first
    }
    if (kDq && consumer == 0) named_sync(5, 2 * 128);  // consumer 1's last turn handed over
    if (sums.dk && w.head_end - w.head_first < group) {
      add_dkdv<D>(ring, dk, dv, 64 * consumer, sums, g, t, w.kvh, w.head_first - w.kvh * group);
    } else if (keys_begin < keys_end) {
      if (sums.dk) {
#pragma unroll
        for (int r = 0; r < 2; ++r)
          if (threadIdx.x % 4 == 0 && f0.row(2 * r) < tile_end) *sums.final_kv(g, t.doc_start + f0.row(2 * r)) = 1;
      }
      store_rows<T, D>(dk, f0, g.scale, tile_end, t.doc_start, g.kv_heads, w.kvh, a.dk);
      store_rows<T, D>(dv, f0, 1.0f, tile_end, t.doc_start, g.kv_heads, w.kvh, a.dv);
    }
  }
#endif
}

// An ordered sum of `heads` heads of D columns, [heads, T, D] fp32, and the gradient
// it becomes, [T, heads, D] of T, times `scale`; tokens marked in `skip` (if given)
// were stored final by the dK/dV kernel and are left alone.
template <class T>
struct SumPart {
  const float* sum;
  T* out;
  uint32_t heads;
  float scale;
  const int* skip;
};
constexpr int kMostSumParts = 3;  // dQ, dK, dV
template <class T>
struct SumParts {
  SumPart<T> part[kMostSumParts];
  int count;
};

// out[t, h] = scale * sum[h, t] (columns permuted back, sum_column) for every part in
// one launch, four elements per thread and step of a grid-stride loop over the parts'
// elements end to end (grid_for caps the grid). Indices are 32-bit (from_sums checks
// the count): a 64-bit division by the head count per four elements cost more than
// their bytes.
template <class T, int D>
__global__ void from_sums_kernel(const SumParts<T> parts, uint32_t tokens) {
  constexpr uint32_t kQuads = D / 4;
  uint32_t count = 0;
#pragma unroll
  for (int p = 0; p < kMostSumParts; ++p)
    if (p < parts.count) count += tokens * parts.part[p].heads * kQuads;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) {
    // The part of element i, found without indexing the parameters by a variable
    // (which would copy them to local memory).
    SumPart<T> part = parts.part[0];
    uint32_t local = i;
#pragma unroll
    for (int next = 1; next < kMostSumParts; ++next) {
      const uint32_t elements = tokens * part.heads * kQuads;
      if (next < parts.count && local >= elements) {
        local -= elements;
        part = parts.part[next];
      }
    }
    const uint32_t row = local / kQuads, token = row / part.heads;  // row = t * heads + h
    if (part.skip && part.skip[token]) continue;
    const uint32_t c = local % kQuads * 4, h = row - token * part.heads;
    const int64_t at = (int64_t{h} * tokens + token) * D + sum_column(token, static_cast<int>(c));
    const float4 s = *reinterpret_cast<const float4*>(part.sum + at);
    uint2 packed;
    packed.x = pack2<T>(s.x * part.scale, s.y * part.scale);
    packed.y = pack2<T>(s.z * part.scale, s.w * part.scale);
    *reinterpret_cast<uint2*>(part.out + int64_t{row} * D + c) = packed;
  }
}

template <class T, int D>
void from_sums(const SumParts<T>& parts, int64_t tokens, const Shape& shape, const char* op) {
  if (parts.count == 0) return;
  int64_t count = 0;
  for (int p = 0; p < parts.count; ++p) count += tokens * parts.part[p].heads * (D / 4);
  AMBER_CHECK(count < (int64_t{1} << 31), op, ": ", tokens, " tokens of ", D,
              "-wide gradients exceed the gradient conversion's 32-bit count; use fewer tokens per micro-batch");
  from_sums_kernel<T, D><<<grid_for(count, 256), 256, 0, current_stream()>>>(parts, static_cast<uint32_t>(tokens));
  check_launch(op, shape);
}

}  // namespace

bool backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& lse,
              const Tensor& delta, const Layout& unplanned, DerivedTensors& plans, Tensor& dq, Tensor& dk,
              Tensor& dv, const QkNormRopeGrad* then) {
  const char* op = "attention_backward";
  bool then_done = false;
  tensor_core::with_types(q, op, [&]<class T, int D>() {
    // The dQ kernel takes plan slots; the dK/dV kernel, work items.
    const Layout g = D == 64 ? unplanned : with_tile_plan(unplanned, kOwnRows, false, q.device(), plans, op);
    const int64_t tokens = q.size(0);
    const bool grouped = g.heads != g.kv_heads;
    constexpr bool kFoldDq = D == 64;
    const auto f32 = [](Tensor& t) { return t.defined() ? static_cast<float*>(t.raw()) : nullptr; };
    Tensor dq_sum, dk_sum, dv_sum;
    if (kFoldDq) dq_sum = Tensor::empty({g.heads, tokens, D}, DType::f32, q.device());
    if (grouped) {
      dk_sum = Tensor::empty({g.kv_heads, tokens, D}, DType::f32, q.device());
      dv_sum = Tensor::empty({g.kv_heads, tokens, D}, DType::f32, q.device());
    }
    Tensor counters =
        Tensor::empty({OrderedSums::final_kv_offset(g) + (grouped ? tokens : 0)}, DType::i32, q.device());
    AMBER_CHECK(cudaMemsetAsync(counters.raw(), 0, counters.bytes(), current_stream()) == cudaSuccess, op,
                ": cannot clear the ordered sums' counters");
    const OrderedSums sums{f32(dq_sum), f32(dk_sum), f32(dv_sum), static_cast<int*>(counters.raw())};
    // Under GQA dk and dv come from the ordered sums, so no per-head partials.
    const BackwardArgs<T> args{static_cast<const T*>(q.raw()), static_cast<const T*>(k.raw()),
                               static_cast<const T*>(v.raw()), static_cast<const T*>(dout.raw()),
                               static_cast<const float*>(lse.raw()), static_cast<const float*>(delta.raw()),
                               static_cast<T*>(dq.raw()), static_cast<T*>(dk.raw()), static_cast<T*>(dv.raw()),
                               nullptr, nullptr};
    const Maps dkdv_maps = make_maps<2>(k, v, q, dout, kDkdvQueries<kFoldDq>, op);
    if constexpr (!kFoldDq) {
      constexpr int dq_smem = DqRing<D>::kSmemBytes;
      allow_smem(reinterpret_cast<const void*>(dq_kernel<T, D>), dq_smem, op);
      dq_kernel<T, D><<<attention_grid(g, g.heads, op), kThreads, dq_smem, current_stream()>>>(
          make_maps<2>(q, dout, k, v, kDqKeys, op), g, args);
      check_launch(op, q.shape());
    }
    constexpr int smem = kFoldDq ? kDqTilesSmemBytes<DkdvRing<D, true>> : DkdvRing<D, false>::kSmemBytes;
    allow_smem(reinterpret_cast<const void*>(dkdv_kernel<T, D, kFoldDq>), smem, op);
    const WorkList work = with_work_list(unplanned, kOwnRows, grouped_tiles<D>(g), kFoldDq, q.device(), plans, op);
    const unsigned blocks = static_cast<unsigned>(std::min(work.capacity, sm_count()));  // one per SM
    dkdv_kernel<T, D, kFoldDq><<<blocks, kThreads, smem, current_stream()>>>(dkdv_maps, g, args, sums, work);
    check_launch(op, k.shape());
    SumParts<T> parts{};
    const auto add_part = [&](const Tensor& sum, T* out, int heads, float scale, const int* skip) {
      parts.part[parts.count++] = {static_cast<const float*>(sum.raw()), out, static_cast<uint32_t>(heads), scale, skip};
    };
    // With `then` on shapes its fused kernel holds, dQ stays in its f32 sum, which the
    // QK-norm + RoPE backward reads after dK is converted.
    then_done = kFoldDq && then && qk_norm_rope_backward_fuses(then->q, then->k, *then->table);
    if (kFoldDq && !then_done) add_part(dq_sum, args.dq, g.heads, g.scale, nullptr);
    if (grouped) {
      const int* final_kv = sums.counters + OrderedSums::final_kv_offset(g);
      add_part(dk_sum, args.dk, g.kv_heads, 1.0f, final_kv);
      add_part(dv_sum, args.dv, g.kv_heads, 1.0f, final_kv);
    }
    from_sums<T, D>(parts, tokens, q.shape(), op);
    if (then_done) {
      const OrderedSum dq_source{static_cast<const float*>(dq_sum.raw()), g.scale};
      cuda::qk_norm_rope_backward(then->q, then->k, then->positions, *then->table, &dq_source);
    }
  });
  return then_done;
}

}  // namespace amber::cuda::hopper
