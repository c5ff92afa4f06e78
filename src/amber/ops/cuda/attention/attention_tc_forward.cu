// Tensor-core attention forward (bf16/f16, head_dim 64 and 128): the flash-attention-2
// schedule on mma.sync. A block owns 64 query rows of one head, 16 per warp; key/value
// tiles of 64 stream through a double-buffered cp.async pipeline, scores stay in
// registers, and the online softmax runs in the log2 domain in fp32. Masks are applied
// only on tiles that touch the diagonal or the window's edge.
#include "amber/core/stream.h"
#include "amber/ops/cuda/attention/attention_tc.cuh"

namespace amber::cuda::tensor_core {
namespace {

template <int D>
struct ForwardShape {
  static_assert(D == 64 || D == 128, "head_dim 64 or 128");
  static constexpr int kWarps = 4, kThreads = 32 * kWarps;
  static constexpr int kRows = 16 * kWarps;  // query rows per block
  static constexpr int kKeys = 64;           // keys per pipeline stage
  static constexpr int S = stride_of<D>();
  static constexpr int kQElems = kRows * S, kKVElems = kKeys * S;
  static constexpr int kSmemElems = kQElems + 4 * kKVElems;  // q, then k[2], v[2]
};

template <class T, int D>
__global__ void __launch_bounds__(ForwardShape<D>::kThreads)
    forward_kernel(Layout g, ForwardArgs<T> a) {
  using F = ForwardShape<D>;
  constexpr int S = F::S, kKeys = F::kKeys;
  extern __shared__ uint4 smem16[];
  T* sq = reinterpret_cast<T*>(smem16);
  T* sk = sq + F::kQElems;       // two stages
  T* sv = sk + 2 * F::kKVElems;  // two stages
  TileRange t;
  if (!tile_of(g, true, t)) return;
  const int h = blockIdx.y, kvh = h / (g.heads / g.kv_heads), warp = threadIdx.x / 32;
  const int tile_end = t.begin + t.rows;
  const int key_begin = first_key(t.begin, g.window) / kKeys * kKeys;
  const int stages = (tile_end - key_begin + kKeys - 1) / kKeys;
  const auto load_stage = [&](int stage) {
    const int kt = key_begin + stage * kKeys, buf = stage % 2;
    async_rows<T, D, F::kThreads>(a.k, t.doc_start, kt, kKeys, tile_end, g.kv_heads, kvh, sk + buf * F::kKVElems);
    async_rows<T, D, F::kThreads>(a.v, t.doc_start, kt, kKeys, tile_end, g.kv_heads, kvh, sv + buf * F::kKVElems);
  };
  async_rows<T, D, F::kThreads>(a.q, t.doc_start, t.begin, F::kRows, tile_end, g.heads, h, sq);
  load_stage(0);
  cp_async_commit();

  const float scale_log2 = g.scale * kLog2e;
  OnlineSoftmax softmax(a.sinks, h);
  float o[D / 8][4] = {};
  uint32_t qa[D / 16][4];  // this warp's queries, read from shared memory once
  for (int stage = 0; stage < stages; ++stage) {
    next_stage(stage, stages, load_stage);
    if (stage == 0) load_a<T, D, S>(qa, sq + warp * 16 * S);
    const int kt = key_begin + stage * kKeys, buf = stage % 2;
    float s[kKeys / 8][4] = {};
    warp_abt<T, D, kKeys, S>(s, qa, sk + buf * F::kKVElems);
    const Fragment f{t.begin + warp * 16, kt};
    const bool edge = kt + kKeys - 1 > t.begin || (g.window > 0 && kt <= tile_end - g.window);
    softmax.stage<kKeys, D>(s, o, f, edge, g.window, scale_log2, Exp2Ieee{});
    warp_pb<T, kKeys, D, S>(o, s, sv + buf * F::kKVElems);
    __syncthreads();  // the next stage's load overwrites this buffer
  }
  const Fragment f{t.begin + warp * 16, 0};
  softmax.finish<D>(o, f, tile_end, t.doc_start, g.heads, h, a.lse);
  store_rows<T, D>(o, f, 1.0f, tile_end, t.doc_start, g.heads, h, a.out);
}

}  // namespace

bool supports(DType dtype, int64_t head_dim) {
  return (dtype == DType::bf16 || dtype == DType::f16) && (head_dim == 64 || head_dim == 128);
}

void forward(const Tensor& q, const Tensor& k, const Tensor& v, const Layout& unplanned,
             DerivedTensors& plans, const float* sinks, Tensor& out, Tensor& lse) {
  const char* op = "attention_forward";
  const Layout g = with_tile_plan(unplanned, ForwardShape<64>::kRows, false, q.device(), plans, op);
  with_types(q, op, [&]<class T, int D>() {
    using F = ForwardShape<D>;
    const size_t smem = F::kSmemElems * sizeof(T);
    allow_smem(reinterpret_cast<const void*>(forward_kernel<T, D>), smem, op);
    forward_kernel<T, D><<<attention_grid(g, g.heads, op), F::kThreads, smem,
                           current_stream()>>>(
        g, ForwardArgs<T>{static_cast<const T*>(q.raw()), static_cast<const T*>(k.raw()),
                          static_cast<const T*>(v.raw()), sinks, static_cast<T*>(out.raw()),
                          static_cast<float*>(lse.raw())});
  });
  check_launch(op, q.shape());
}

}  // namespace amber::cuda::tensor_core
