// Hopper attention forward (sm_90a; bf16/f16, head_dim 64 and 128). A block owns 128
// query rows of one head: one producer warpgroup whose single thread issues TMA copies
// of Q and of a ring of 128-key K/V tiles, each completing on an mbarrier,
// and two consumer warpgroups of 64 rows each that compute S = Q K^T with wgmma from
// shared memory, run the online softmax in registers (log2 domain, fp32), and add
// P V with P fed to wgmma from registers. Consumers hand a stage back by arriving on
// its "empty" barrier; masks are applied only on tiles at the diagonal or the window's
// edge. Keys past a document's end belong to the next document (or are TMA's zeros)
// and are always masked; their V rows meet a zero probability.
#include "amber/ops/cuda/attention_hopper.cuh"

namespace amber::cuda::hopper {
namespace {

using tensor_core::Fragment;
using tensor_core::kLn2;
using tensor_core::kLog2e;
using tensor_core::quad_max;
using tensor_core::quad_sum;

constexpr int kKeys = 128;  // keys per streamed stage
template <int D>
using ForwardRing = Ring<D, 1, kKeys, ring_stages<D, 1, kKeys>()>;

template <class T, int D>
__global__ void __launch_bounds__(kThreads, 1) forward_kernel(const __grid_constant__ Maps maps, Layout g,
                                                              ForwardArgs<T> a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using R = ForwardRing<D>;
  extern __shared__ uint8_t smem_raw[];
  const R ring(smem_raw);
  TileRange t;
  if (!tile_of(g, true, t)) return;
  const int h = blockIdx.y, kvh = h / (g.heads / g.kv_heads);
  const int group = threadIdx.x / 128;  // 0: producer, 1..: consumers
  const int tile_end = t.begin + t.rows;
  const int key_begin = first_key(t.begin, g.window) / kKeys * kKeys;
  const int stages = (tile_end - key_begin + kKeys - 1) / kKeys;
  ring.init(0);
  if (group == 0) {
    release_registers<24>();
    const int row0 = static_cast<int>(t.doc_start);
    if (threadIdx.x == 0) ring.produce(maps, h, row0 + t.begin, kvh, row0 + key_begin, stages);
    return;
  }

  claim_registers<240>();
  const int consumer = group - 1, warp = (threadIdx.x / 32) % 4;
  const int rows_begin = t.begin + 64 * consumer;  // this warpgroup's 64 rows
  const int rows_end = min(rows_begin + 64, tile_end);
  const Fragment f0{rows_begin + 16 * warp, 0};
  const float scale_log2 = g.scale * kLog2e;
  // The sink is a key of logit s_h seen first: (max, sum) start at (s_h, 1), the sum
  // counted once per row (by the quad's first lane), and its zero value adds nothing.
  float m[2], l[2], o[D / 8][4] = {};
  for (int r = 0; r < 2; ++r) {
    m[r] = a.sinks ? a.sinks[h] * kLog2e : -INFINITY;
    l[r] = a.sinks && threadIdx.x % 4 == 0 ? 1.0f : 0.0f;
  }
  const uint64_t q_desc = k_major(ring.own(0) + consumer * 64 * 128);  // 64 rows into each panel
  barrier_wait(ring.own_full(), 0);
  for (int stage = 0; stage < stages; ++stage) {
    const int kt = key_begin + stage * kKeys;
    const bool needed = rows_begin < rows_end && kt < rows_end &&
                        (g.window == 0 || kt + kKeys - 1 >= first_key(rows_begin, g.window));
    barrier_wait(ring.full(stage), R::parity(stage));
    if (needed) {
      float s[kKeys / 8][4];
      product_abt<T, D, kKeys, R::kOwnPanelBytes, R::kStreamPanelBytes>(s, q_desc, k_major(ring.stream(stage, 0)));
      complete(s);
      const Fragment f{f0.row0, kt};
      const bool edge = kt + kKeys - 1 > rows_begin || (g.window > 0 && kt <= rows_end - g.window);
      if (edge) {
#pragma unroll
        for (int nt = 0; nt < kKeys / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (!visible(f.row(e), f.col(nt, e), g.window)) s[nt][e] = -INFINITY;
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < kKeys / 8; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
        const float m_new = fmaxf(m[r], quad_max(mx) * scale_log2);
        // A row that has seen nothing yet keeps max -inf: 0 as the reference gives
        // exp2 = 0 instead of NaN.
        const float ref = m_new == -INFINITY ? 0.0f : m_new;
        const float rescale = exp2_fast(m[r] - ref);
        m[r] = m_new;
        l[r] *= rescale;
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) o[dt][2 * r] *= rescale, o[dt][2 * r + 1] *= rescale;
#pragma unroll
        for (int nt = 0; nt < kKeys / 8; ++nt)
#pragma unroll
          for (int e = 2 * r; e < 2 * r + 2; ++e) {
            s[nt][e] = exp2_fast(s[nt][e] * scale_log2 - ref);
            l[r] += s[nt][e];
          }
      }
      product_pb<T, kKeys, D>(o, s, mn_major(ring.stream(stage, 1), R::kStreamPanelBytes));
      complete(o);
    }
    if (threadIdx.x % 32 == 0) barrier_arrive(ring.empty(stage));
  }
  if (rows_begin >= rows_end) return;
  float inv[2];
  for (int r = 0; r < 2; ++r) {
    l[r] = quad_sum(l[r]);
    inv[r] = 1.0f / l[r];
    const int i = f0.row(2 * r);
    if (i < tile_end && threadIdx.x % 4 == 0) a.lse[(t.doc_start + i) * g.heads + h] = (m[r] + log2f(l[r])) * kLn2;
  }
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[dt][e] *= inv[e / 2];
  tensor_core::store_rows<T, D>(o, f0, 1.0f, tile_end, t.doc_start, g.heads, h, a.out);
#endif
}

}  // namespace

bool supports(const Tensor& q) {
#if defined(AMBER_HOPPER_KERNELS)
  if (!tensor_core::supports(q.dtype(), q.size(2))) return false;
  static const bool hopper = [] {
    int device = 0, major = 0;
    return cudaGetDevice(&device) == cudaSuccess &&
           cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess && major == 9;
  }();
  return hopper;
#else
  return false;
#endif
}

void forward(const Tensor& q, const Tensor& k, const Tensor& v, const Layout& unplanned, const float* sinks, Tensor& out,
             Tensor& lse) {
  const char* op = "attention_forward";
  Tensor plan;
  const Layout g = with_tile_plan(unplanned, kOwnRows, q.device(), plan, op);
  tensor_core::with_types(q, op, [&]<class T, int D>() {
    const Maps maps = make_maps<1>(q, q, k, v, kKeys, op);
    constexpr int smem = ForwardRing<D>::kSmemBytes;
    allow_smem(reinterpret_cast<const void*>(forward_kernel<T, D>), smem, op);
    forward_kernel<T, D><<<attention_grid(g, g.heads, op), kThreads, smem,
                           cudaStreamPerThread>>>(
        maps, g,
        ForwardArgs<T>{static_cast<const T*>(q.raw()), static_cast<const T*>(k.raw()),
                       static_cast<const T*>(v.raw()), sinks, static_cast<T*>(out.raw()),
                       static_cast<float*>(lse.raw())});
  });
  check_launch(op, q.shape());
}

}  // namespace amber::cuda::hopper
