// Hopper attention forward (sm_90a; bf16/f16, head_dim 64 and 128). A block owns 192
// query rows of one head at head_dim 64, 128 at 128: one producer warpgroup whose
// single thread issues TMA copies of Q and of a ring of 128-key K/V tiles, each
// completing on an mbarrier, and three (two) consumer warpgroups of 64 rows each that
// compute S = Q K^T with wgmma from shared memory, run the online softmax in registers
// (log2 domain, fp32), and add P V with P fed to wgmma from registers (at head_dim 64
// a stage's P V product is issued behind the next stage's scores, so it runs while
// their softmax does). Consumers hand a stage back by arriving on its "empty" barrier;
// masks are applied only on tiles at the diagonal or the window's edge. Keys past a
// document's end belong to the next document (or are TMA's zeros) and are always
// masked; their V rows meet a zero probability.
#include "amber/ops/cuda/attention_hopper.cuh"

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
template <int D>
using ForwardRing = Ring<D, 1, kKeys, ring_stages<D, 1, kKeys, 0, 0, kForwardGroups<D>>(), 0, kForwardGroups<D>>;
// A consumer holds a stage (its P V product pending) while it waits for the next.
static_assert(ring_stages<64, 1, kKeys, 0, 0, kForwardGroups<64>>() >= 2 &&
                  ring_stages<128, 1, kKeys, 0, 0, kForwardGroups<128>>() >= 2,
              "the forward's ring holds two stages");

template <class T, int D>
__global__ void __launch_bounds__(kForwardThreads<D>, 1)
    forward_kernel(const __grid_constant__ Maps maps, Layout g, ForwardArgs<T> a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using R = ForwardRing<D>;
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
  const int rows_begin = t.begin + 64 * consumer;  // this warpgroup's 64 rows
  const int rows_end = min(rows_begin + 64, tile_end);
  const Fragment f0{rows_begin + 16 * warp, 0};
  const float scale_log2 = g.scale * kLog2e;
  tensor_core::OnlineSoftmax softmax(a.sinks, h);
  float o[D / 8][4] = {};
  const uint64_t q_desc = k_major(ring.own(0) + consumer * 64 * 128);  // 64 rows into each panel
  // The stages this warpgroup needs are one run: keys before its rows' window and
  // past its last row are skipped (the stage only waited for and handed back).
  const int needed_end = rows_begin < rows_end ? min(stages, (rows_end - key_begin + kKeys - 1) / kKeys) : 0;
  const int needed_begin = g.window > 0 ? min(needed_end, (first_key(rows_begin, g.window) - key_begin) / kKeys) : 0;
  const auto skip = [&](int stage) {
    barrier_wait(ring.full(stage), R::parity(stage));
    if (threadIdx.x % 32 == 0) barrier_arrive(ring.empty(stage));
  };
  // Scores of a stage, exponentiated in place (rescale: the output's factor).
  const auto scores = [&](int stage, float (&s)[kKeys / 8][4], float (&rescale)[2]) {
    const int kt = key_begin + stage * kKeys;
    pin(s);
    const bool edge = kt + kKeys - 1 > rows_begin || (g.window > 0 && kt <= rows_end - g.window);
    softmax.exponentiate<kKeys>(s, Fragment{f0.row0, kt}, edge, g.window, scale_log2, Exp2Fast{}, rescale);
  };
  // A stage's scores product, issued once its tiles have landed.
  const auto issue_scores = [&](int stage, float (&s)[kKeys / 8][4]) {
    barrier_wait(ring.full(stage), R::parity(stage));
    product_abt<T, D, kKeys, R::kOwnPanelBytes, R::kStreamPanelBytes>(s, q_desc, k_major(ring.stream(stage, 0)));
    wgmma_commit();
  };
  const auto add_pv = [&](int stage, const uint32_t (&p)[kKeys / 16][4]) {
    product_ab<T, kKeys, D>(o, p, mn_major(ring.stream(stage, 1), R::kStreamPanelBytes));
    wgmma_commit();
  };
  // Every product has landed: the output may be read and the stage handed back.
  const auto retire = [&](int stage) {
    wgmma_wait<0>();
    pin(o);
    if (threadIdx.x % 32 == 0) barrier_arrive(ring.empty(stage));
  };
  barrier_wait(ring.own_full(), 0);
  for (int stage = 0; stage < needed_begin; ++stage) skip(stage);
  if constexpr (!kOverlapPv<D>) {
    for (int stage = needed_begin; stage < needed_end; ++stage) {
      float s[kKeys / 8][4], rescale[2];
      uint32_t p[kKeys / 16][4];
      issue_scores(stage, s);
      wgmma_wait<0>();
      scores(stage, s, rescale);
      tensor_core::OnlineSoftmax::rescale_rows<D>(o, rescale);
      to_operand<T, kKeys>(s, p);
      add_pv(stage, p);
      retire(stage);
    }
  } else if (needed_begin < needed_end) {
    // A stage's P V product is issued behind the next stage's scores and runs while
    // their softmax does; the output is rescaled once it has landed.
    uint32_t p[kKeys / 16][4];  // the previous stage's probabilities, rounded to T
    {
      float s[kKeys / 8][4], rescale[2];
      issue_scores(needed_begin, s);
      wgmma_wait<0>();
      scores(needed_begin, s, rescale);  // o is still zero: nothing to rescale
      to_operand<T, kKeys>(s, p);
    }
    for (int stage = needed_begin + 1; stage < needed_end; ++stage) {
      float s[kKeys / 8][4], rescale[2];
      issue_scores(stage, s);
      add_pv(stage - 1, p);
      wgmma_wait<1>();
      scores(stage, s, rescale);
      retire(stage - 1);
      tensor_core::OnlineSoftmax::rescale_rows<D>(o, rescale);
      to_operand<T, kKeys>(s, p);
    }
    add_pv(needed_end - 1, p);
    retire(needed_end - 1);
  }
  for (int stage = needed_end; stage < stages; ++stage) skip(stage);
  if (rows_begin >= rows_end) return;
  softmax.finish<D>(o, f0, tile_end, t.doc_start, g.heads, h, a.lse);
  tensor_core::store_rows<T, D>(o, f0, 1.0f, tile_end, t.doc_start, g.heads, h, a.out);
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

void forward(const Tensor& q, const Tensor& k, const Tensor& v, const Layout& unplanned, const float* sinks, Tensor& out,
             Tensor& lse) {
  const char* op = "attention_forward";
  tensor_core::with_types(q, op, [&]<class T, int D>() {
    constexpr int kRows = ForwardRing<D>::kRows;
    Tensor plan;
    const Layout g = with_tile_plan(unplanned, kRows, q.device(), plan, op);
    const Maps maps = make_maps<1>(q, q, k, v, kKeys, op, kRows);
    constexpr int smem = ForwardRing<D>::kSmemBytes;
    allow_smem(reinterpret_cast<const void*>(forward_kernel<T, D>), smem, op);
    forward_kernel<T, D><<<attention_grid(g, g.heads, op), kForwardThreads<D>, smem,
                           cudaStreamPerThread>>>(
        maps, g,
        ForwardArgs<T>{static_cast<const T*>(q.raw()), static_cast<const T*>(k.raw()),
                       static_cast<const T*>(v.raw()), sinks, static_cast<T*>(out.raw()),
                       static_cast<float*>(lse.raw())});
  });
  check_launch(op, q.shape());
}

}  // namespace amber::cuda::hopper
