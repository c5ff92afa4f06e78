// Hopper attention forward (sm_90a; bf16/f16, head_dim 64 and 128). A persistent block
// (one per SM) takes tiles of 192 query rows of one head at head_dim 64, 128 at 128 (of
// one document, or with kPack of several short documents packed into one segment:
// Layout), one after another: one producer warpgroup whose single thread issues TMA
// copies of Q and of a ring of 128-key K/V tiles, each completing on an mbarrier, and
// three (two) consumer warpgroups of 64 rows each that compute S = Q K^T with wgmma
// from shared memory, run the online softmax in registers (log2 domain, fp32), and add
// P V with P fed to wgmma from registers (at head_dim 64 a stage's P V product is
// issued behind the next stage's scores, so it runs while their softmax does, and a
// diagonal stage is computed 64 keys wide where its second half lies past a consumer's
// rows). Consumers hand a stage back by arriving on its "empty" barrier; masks are
// applied only on tiles at the diagonal or the window's edge, and on every tile of a
// packed segment (by each row's document). Keys past a document's end belong to the
// next document (or are TMA's zeros) and are always masked; their V rows meet a zero
// probability.
#include <algorithm>

#include "amber/core/stream.h"
#include "amber/ops/cuda/attention/attention_hopper.cuh"

namespace amber::cuda::hopper {
namespace {

using tensor_core::Fragment;
using tensor_core::kLog2e;

constexpr int kKeys = 128;  // keys per streamed stage
// Consumer warpgroups: three at head_dim 64 (192 query rows a block), where a
// consumer's softmax leaves the tensor cores idle unless two others have products
// queued; two at 128, whose output accumulators need the 240 registers two allow.
template <int D>
constexpr int kForwardGroups = D == 64 ? 3 : 2;
// Whether a stage's P V product waits to be issued behind the next stage's scores. It
// pays with three consumers (head_dim 64: 0.275 -> 0.265 ms on shape A); with two
// (head_dim 128) it lost 7-13%, their products already interleaving.
template <int D>
constexpr bool kOverlapPv = kForwardGroups<D> == 3;
template <int D>
constexpr int kForwardThreads = 128 * (kForwardGroups<D> + 1);  // and the producer warpgroup
// Registers after setmaxnreg at head_dim 128: the persistent producer's loop spilled 44
// bytes at 24 registers and none at 40; the consumers fit 232 without spilling.
template <int D>
constexpr int kForwardProducerRegisters = kForwardGroups<D> == 2 ? 40 : kProducerRegisters<kForwardGroups<D>>;
template <int D>
constexpr int kForwardConsumerRegisters = kForwardGroups<D> == 2 ? 232 : kConsumerRegisters<kForwardGroups<D>>;
template <int D>
using ForwardRing = Ring<D, 1, kKeys, ring_stages<D, 1, kKeys, 0, 0, kForwardGroups<D>>(), 0, kForwardGroups<D>>;
// A consumer holds a stage (its P V product pending) while it waits for the next.
static_assert(ring_stages<64, 1, kKeys, 0, 0, kForwardGroups<64>>() >= 2 &&
                  ring_stages<128, 1, kKeys, 0, 0, kForwardGroups<128>>() >= 2,
              "the forward's ring holds two stages");

// A stage's width in keys, chosen at run time among compiled widths.
template <int N>
struct Width {};

// The first M k-steps of a stage's probabilities, those of a narrow stage.
template <int M>
__device__ __forceinline__ uint32_t (&leading(uint32_t (&p)[kKeys / 16][4]))[M][4] {
  return reinterpret_cast<uint32_t(&)[M][4]>(p);
}

// A block's share of the work: the tile of work item w (plan slot w % tile_slots of
// head w / tile_slots), its KV head, its first key stage's key and its stage count.
struct ForwardWork {
  TileRange t;
  int h, kvh, key_begin, stages;
};

__device__ __forceinline__ bool forward_work(const Layout& g, int w, ForwardWork& x) {
  if (!tile_of(g, w % g.tile_slots, true, x.t)) return false;
  x.h = w / g.tile_slots;
  x.kvh = x.h / (g.heads / g.kv_heads);
  x.key_begin = first_key(x.t.begin, g.window) / kKeys * kKeys;
  x.stages = (x.t.begin + x.t.rows - x.key_begin + kKeys - 1) / kKeys;
  return true;
}

// One persistent block per SM takes work items in the order of a shared ticket (heads
// major, each document's last tile first, so the longest tiles start first). Its
// producer thread draws the ticket, publishes the item in shared memory and loads the
// tile's Q once the consumers have handed the previous one back (own_empty), which
// they do as soon as their last product has landed, so the load runs behind their
// epilogue; K/V stages count on across tiles, so the next tile's stream starts as ring
// stages free. An item past the end tells the consumers to stop. kPack: the plan's
// segments may pack short documents; a separate kernel, so that layouts without
// packing run the code they ran before it (checks for packing measured 1-4% slower
// on shapes B and C when compiled into every layout's kernel).
template <class T, int D, bool kPack>
__global__ void __launch_bounds__(kForwardThreads<D>, 1)
    forward_kernel(const __grid_constant__ Maps maps, Layout g, ForwardArgs<T> a, int items, int* ticket) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using R = ForwardRing<D>;
  extern __shared__ uint8_t smem_raw[];
  __shared__ int published;  // the current tile's work item
  const R ring(smem_raw);
  ring.init(0);
  if (threadIdx.x < 128) {
    release_registers<kForwardProducerRegisters<D>>();
    if (threadIdx.x != 0) return;
    // The next work item with a tile (plan slots past the documents' tiles have none).
    const auto draw = [&] {
      ForwardWork x;
      int w;
      do w = atomicAdd(ticket, 1);
      while (w < items && !forward_work(g, w, x));
      return w;
    };
    int w = draw();
    for (int first_stage = 0, tile = 0;; ++tile) {
      if (tile > 0) barrier_wait(ring.own_empty(), (tile - 1) & 1);
      published = w;
      if (w >= items) {
        barrier_arrive(ring.own_full());
        return;
      }
      ForwardWork x;
      forward_work(g, w, x);
      ring.produce(maps, x.h, static_cast<int>(x.t.doc_start) + x.t.begin, x.kvh,
                   static_cast<int>(x.t.doc_start) + x.key_begin, x.stages, first_stage);
      first_stage += x.stages;
      w = draw();  // while the consumers work through the tile's last stages
    }
  }
  claim_registers<kForwardConsumerRegisters<D>>();
  const int consumer = threadIdx.x / 128 - 1, warp = (threadIdx.x / 32) % 4;
  const float scale_log2 = g.scale * kLog2e;
  const uint64_t q_desc = k_major(ring.own(0) + consumer * 64 * 128);  // 64 rows into each panel
  for (int first_stage = 0, tile = 0;;) {
    barrier_wait(ring.own_full(), tile & 1);
    const int w = published;
    if (w >= items) return;
    ForwardWork x;
    forward_work(g, w, x);
    const TileRange& t = x.t;
    const int tile_end = t.begin + t.rows, key_begin = x.key_begin, stages = x.stages;
    const int rows_begin = t.begin + 64 * consumer;  // this warpgroup's 64 rows
    const int rows_end = min(rows_begin + 64, tile_end);
    const Fragment f0{rows_begin + 16 * warp, 0};
    tensor_core::OnlineSoftmax softmax(a.sinks, x.h);
    float o[D / 8][4] = {};
    // A segment of packed short documents is masked in every stage, by each row's
    // document.
    const bool packed_tile = kPack && packed(g, t);
    // The stages this warpgroup needs are one run: keys before its rows' window or
    // document and past its last row are skipped (the stage only waited for and
    // handed back).
    const int needed_end = rows_begin < rows_end ? min(stages, (rows_end - key_begin + kKeys - 1) / kKeys) : 0;
    const int rows_first_key = packed_tile ? max(first_key(rows_begin, g.window), document_start(g, t, rows_begin))
                                           : first_key(rows_begin, g.window);
    const int needed_begin = min(needed_end, (rows_first_key - key_begin) / kKeys);
    // Stage s of this tile is the ring's stage first_stage + s.
    const auto skip = [&](int s) {
      barrier_wait(ring.full(first_stage + s), R::parity(first_stage + s));
      if (threadIdx.x % 32 == 0) barrier_arrive(ring.empty(first_stage + s));
    };
    // The last needed stage is the diagonal one; where its second 64 keys all lie past
    // this warpgroup's rows (half the warpgroups: their rows start 128-aligned) it is
    // computed 64 keys wide, which frees the tensor cores for the other two consumers
    // (shape C's forward 0.128 -> 0.121 ms). With two consumers (head_dim 128) the
    // tile still waits for the one whose rows need the whole stage, and the narrow
    // stage measured slower (D's forward 1.898 -> 1.921 ms): only the overlapped
    // path below takes it.
    // The products and the softmax below take a stage's width from their accumulators:
    // [kKeys / 8][4] scores for 128 keys, [kKeys / 16][4] for 64.
    const bool narrow_last = rows_end - key_begin <= (needed_end - 1) * kKeys + kKeys / 2;
    const auto at_width = [&](int s, auto&& stage) {
      if (narrow_last && s == needed_end - 1)
        stage(Width<kKeys / 2>{});
      else
        stage(Width<kKeys>{});
    };
    // Scores of a stage, exponentiated in place (rescale: the output's factor).
    const auto scores = [&]<int M>(int s, float (&sc)[M][4], float (&rescale)[2]) {
      const int kt = key_begin + s * kKeys;
      pin(sc);
      const bool edge =
          packed_tile || kt + kKeys - 1 > rows_begin || (g.window > 0 && kt <= rows_end - g.window);
      softmax.exponentiate<8 * M>(sc, Fragment{f0.row0, kt}, edge, g.window, scale_log2, Exp2Fast{}, rescale,
                                  packed_tile ? tensor_core::RowDocuments::of(g, t, f0) : tensor_core::RowDocuments{});
    };
    // A stage's scores product, issued once its tiles have landed.
    const auto issue_scores = [&]<int M>(int s, float (&sc)[M][4]) {
      const int stage = first_stage + s;
      barrier_wait(ring.full(stage), R::parity(stage));
      product_abt<T, D, 8 * M, R::kOwnPanelBytes, R::kStreamPanelBytes>(sc, q_desc, k_major(ring.stream(stage, 0)));
      wgmma_commit();
    };
    const auto add_pv = [&]<int M>(int s, const uint32_t (&p)[M][4]) {
      product_ab<T, 16 * M, D>(o, p, mn_major(ring.stream(first_stage + s, 1), R::kStreamPanelBytes));
      wgmma_commit();
    };
    // Every product has landed: the output may be read and the stage handed back.
    const auto retire = [&](int s) {
      wgmma_wait<0>();
      pin(o);
      if (threadIdx.x % 32 == 0) barrier_arrive(ring.empty(first_stage + s));
    };
    for (int s = 0; s < needed_begin; ++s) skip(s);
    if constexpr (!kOverlapPv<D>) {
      for (int s = needed_begin; s < needed_end; ++s) {
        float sc[kKeys / 8][4], rescale[2];
        uint32_t p[kKeys / 16][4];
        issue_scores(s, sc);
        wgmma_wait<0>();
        scores(s, sc, rescale);
        tensor_core::OnlineSoftmax::rescale_rows<D>(o, rescale);
        to_operand<T, kKeys>(sc, p);
        add_pv(s, p);
        retire(s);
      }
    } else if (needed_begin < needed_end) {
      // A stage's P V product is issued behind the next stage's scores and runs while
      // their softmax does; the output is rescaled once it has landed.
      uint32_t p[kKeys / 16][4];  // the previous stage's probabilities, rounded to T
      at_width(needed_begin, [&]<int N>(Width<N>) {
        float sc[N / 8][4], rescale[2];
        issue_scores(needed_begin, sc);
        wgmma_wait<0>();
        scores(needed_begin, sc, rescale);  // o is still zero: nothing to rescale
        to_operand<T, N>(sc, leading<N / 16>(p));
      });
      for (int s = needed_begin + 1; s < needed_end; ++s)
        at_width(s, [&]<int N>(Width<N>) {
          float sc[N / 8][4], rescale[2];
          issue_scores(s, sc);
          add_pv(s - 1, p);  // only the last stage is narrow
          wgmma_wait<1>();
          scores(s, sc, rescale);
          retire(s - 1);
          tensor_core::OnlineSoftmax::rescale_rows<D>(o, rescale);
          to_operand<T, N>(sc, leading<N / 16>(p));
        });
      at_width(needed_end - 1, [&]<int N>(Width<N>) { add_pv(needed_end - 1, leading<N / 16>(p)); });
      retire(needed_end - 1);
    }
    for (int s = needed_end; s < stages; ++s) skip(s);
    if (threadIdx.x % 32 == 0) barrier_arrive(ring.own_empty());  // Q is read no more
    first_stage += stages;
    ++tile;
    if (rows_begin >= rows_end) continue;
    softmax.finish<D>(o, f0, tile_end, t.doc_start, g.heads, x.h, a.lse);
    tensor_core::store_rows<T, D>(o, f0, 1.0f, tile_end, t.doc_start, g.heads, x.h, a.out);
  }
#endif
}

}  // namespace

bool supports(const Tensor& q) {
#if defined(AMBER_HOPPER_KERNELS)
  return tensor_core::supports(q.dtype(), q.size(2)) && compute_major(q.device().index) == 9;
#else
  return false;
#endif
}

void forward(const Tensor& q, const Tensor& k, const Tensor& v, const Layout& unplanned, DerivedTensors& plans,
             const float* sinks, Tensor& out, Tensor& lse) {
  const char* op = "attention_forward";
  tensor_core::with_types(q, op, [&]<class T, int D>() {
    constexpr int kRows = ForwardRing<D>::kRows;
    // Short documents are packed where the layout's document slots average less than a
    // tile (a count the host has without reading the lengths, which graphs capture).
    // On documents of 20-100 tokens (shape F) packing took the forward from 0.145 to
    // 0.130 ms; on 50-600 (shape C) it was 3-5% slower, and planning segments costs
    // every layout.
    const bool pack = unplanned.tokens < int64_t{kRows} * unplanned.num_docs;
    const Layout g = with_tile_plan(unplanned, kRows, pack, q.device(), plans, op);
    const Maps maps = make_maps<1>(q, q, k, v, kKeys, op, kRows);
    constexpr int smem = ForwardRing<D>::kSmemBytes;
    const auto kernel = pack ? forward_kernel<T, D, true> : forward_kernel<T, D, false>;
    allow_smem(reinterpret_cast<const void*>(kernel), smem, op);
    const int64_t items = int64_t{g.tile_slots} * g.heads;
    AMBER_CHECK(items < (int64_t{1} << 31), op, ": ", g.tile_slots, " tiles x ", g.heads,
                " heads exceed the work items a launch can count");
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(items, sm_count()));  // one per SM
    Tensor ticket = Tensor::empty({1}, DType::i32, q.device());
    AMBER_CHECK(cudaMemsetAsync(ticket.raw(), 0, sizeof(int), current_stream()) == cudaSuccess, op,
                ": cannot clear the work ticket");
    kernel<<<blocks, kForwardThreads<D>, smem, current_stream()>>>(
        maps, g,
        ForwardArgs<T>{static_cast<const T*>(q.raw()), static_cast<const T*>(k.raw()),
                       static_cast<const T*>(v.raw()), sinks, static_cast<T*>(out.raw()),
                       static_cast<float*>(lse.raw())},
        static_cast<int>(items), static_cast<int*>(ticket.raw()));
  });
  check_launch(op, q.shape());
}

}  // namespace amber::cuda::hopper
