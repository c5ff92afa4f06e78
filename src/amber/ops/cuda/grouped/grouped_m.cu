// m-grouped products on Hopper (sm_90a): y[rows of e] = x[rows of e] op(w_e), the
// forward (op = transpose, w [E, N, K]) and the input gradient (op = identity, w [E, K', N']
// read as [reduction, output]). A persistent block walks the (expert, n-tile, m-tile)
// items of the device plan (grouped_tiles.cuh) in a fixed round robin, so the launch
// depends on the buffers' shapes only and a captured graph replays with any routing.
//
// Roles, one warpgroup each but the first: warp 0 of the first warpgroup is the loader
// (TMA copies of the activation and weight tiles into a ring of stages, each completing
// on an mbarrier); warp 1 is the store partition, which drains finished tiles from a
// shared staging buffer to global memory with bulk copies, one per row so that rows of
// the next expert are never written; two consumer warpgroups of 64 rows each run the
// wgmma products and the epilogue (row scales, SwiGLU) into the staging buffer. With
// kStores false the consumers store from registers themselves (the A/B of the store
// partition, docs/perf/grouped_gemm.md).
#include <algorithm>

#include "amber/core/stream.h"
#include "amber/ops/cuda/activation/glu_math.cuh"
#include "amber/ops/cuda/common/common.cuh"
#include "amber/ops/cuda/common/tensor_map.h"
#include "amber/ops/cuda/common/wgmma.cuh"
#include "amber/ops/cuda/grouped/grouped_gemm.h"
#include "amber/ops/cuda/grouped/grouped_tiles.cuh"

namespace amber::cuda {
namespace {

using namespace hopper;

enum class Epilogue { plain, row_scale, swiglu };

constexpr int kBM = 128, kBK = 64;  // rows of a tile, reduction per stage (its columns: kBN, 128 or 256)
constexpr int kThreads = 384;                  // loader/store warpgroup + two consumers
constexpr int kConsumerRegisters = 232, kProducerRegisters = 40;

// Output columns of a tile: SwiGLU halves the product's.
template <Epilogue kE, int kBN>
constexpr int kOutCols = kE == Epilogue::swiglu ? kBN / 2 : kBN;

// Shared memory: the ring's stages (activation tile, then weight tile), the staging
// buffer (rows padded by 16 bytes, so the consumers' fragment writes fall in distinct
// banks), and for SwiGLU a second one for gate_up; then the barriers.
template <Epilogue kE, int kBN>
struct Smem {
  static constexpr int kABytes = kBM * kBK * 2, kBBytes = kBN * kBK * 2, kStageBytes = kABytes + kBBytes;
  static constexpr int kPitch = kOutCols<kE, kBN> * 2 + 16, kGateUpPitch = kBN * 2 + 16;
  static constexpr int kStagingBytes = kBM * kPitch + (kE == Epilogue::swiglu ? kBM * kGateUpPitch : 0);
  static constexpr int kRoom = 227 * 1024 - 1024 - static_cast<int>(sizeof(grouped::Plan)) - 256;
  static constexpr int kStages = (kRoom - kStagingBytes) / kStageBytes;
  static constexpr int kBarrierOffset = kStages * kStageBytes + kStagingBytes;
  static constexpr int kBytes = kBarrierOffset + 8 * (2 * kStages + 2) + 1024;  // +1024: alignment
  static_assert(kStages >= 3, "the ring needs at least three stages");

  uint8_t* base;
  __device__ explicit Smem(uint8_t* raw) : base(raw + ((1024 - smem_address(raw) % 1024) % 1024)) {}
  __device__ uint8_t* a(int stage) const { return base + (stage % kStages) * kStageBytes; }
  __device__ uint8_t* b(int stage) const { return a(stage) + kABytes; }
  __device__ uint8_t* staging() const { return base + kStages * kStageBytes; }
  __device__ uint8_t* gate_up_staging() const { return staging() + kBM * kPitch; }
  __device__ uint64_t* full(int stage) const {
    return reinterpret_cast<uint64_t*>(base + kBarrierOffset) + stage % kStages;
  }
  __device__ uint64_t* empty(int stage) const { return full(0) + kStages + stage % kStages; }
  __device__ uint64_t* staged() const { return full(0) + 2 * kStages; }
  __device__ uint64_t* drained() const { return staged() + 1; }
  __device__ static int parity(int stage) { return (stage / kStages) & 1; }
};

template <class T>
struct Args {
  const int* offsets;
  int experts, rows;      // rows: of x and y
  int n_out, k;           // output columns of the product (before SwiGLU), reduction length
  int w_rows_per_expert;  // rows of one expert's weight matrix in the 2-D map
  T* y;                   // [rows, y_cols]
  int y_cols;
  T* gate_up;             // SwiGLU: [rows, n_out], or null
  const float* row_scale;
};

struct Maps {
  CUtensorMap x, w;
};

// A work item: expert e, the tile's first row (absolute) and its rows of the expert,
// and its n-tile.
struct Tile {
  int e, row0, rows, n_tile;
};

__device__ __forceinline__ Tile tile_of(const grouped::Plan& p, int experts, int w) {
  const int e = grouped::expert_of(p, experts, w);
  const int m_tiles = (p.count[e] + kBM - 1) / kBM, r = w - p.first[e];
  const int i = r % m_tiles;
  return Tile{e, p.begin[e] + i * kBM, min(kBM, p.count[e] - i * kBM), r / m_tiles};
}

// The loader thread: every stage of every tile of this block.
template <Epilogue kE, int kBN, bool kTransB>
__device__ void load(const Smem<kE, kBN>& s, const Maps& maps, const grouped::Plan& p, int experts, int items, int k,
                     int w_rows_per_expert, int half) {
  const int k_blocks = (k + kBK - 1) / kBK;
  int stage = 0;
  for (int w = blockIdx.x; w < items; w += gridDim.x) {
    const Tile t = tile_of(p, experts, w);
    const int w_row = t.e * w_rows_per_expert;
    for (int kb = 0; kb < k_blocks; ++kb, ++stage) {
      if (stage >= Smem<kE, kBN>::kStages) barrier_wait(s.empty(stage), Smem<kE, kBN>::parity(stage) ^ 1);
      barrier_expect(s.full(stage), Smem<kE, kBN>::kStageBytes);
      tma_load(s.a(stage), maps.x, kb * kBK, t.row0, s.full(stage));
      if constexpr (kTransB) {
        // [reduction rows, output columns]: two 64-column panels of kBK rows.
        for (int panel = 0; panel < kBN / 64; ++panel)
          tma_load(s.b(stage) + panel * kBK * 128, maps.w, t.n_tile * kBN + panel * 64, w_row + kb * kBK,
                   s.full(stage));
      } else if constexpr (kE == Epilogue::swiglu) {
        // The gate's rows of this tile, then the same rows of the up half.
        tma_load(s.b(stage), maps.w, kb * kBK, w_row + t.n_tile * (kBN / 2), s.full(stage));
        tma_load(s.b(stage) + (kBN / 2) * 128, maps.w, kb * kBK, w_row + half + t.n_tile * (kBN / 2), s.full(stage));
      } else {
        tma_load(s.b(stage), maps.w, kb * kBK, w_row + t.n_tile * kBN, s.full(stage));
      }
    }
  }
}

// The store partition (one warp): each finished tile's valid rows, one bulk copy per row
// and output, then the staging buffer is handed back.
template <class T, Epilogue kE, int kBN>
__device__ void drain(const Smem<kE, kBN>& s, const Args<T>& a, const grouped::Plan& p, int items) {
  const int lane = threadIdx.x % 32;
  int done = 0;
  for (int w = blockIdx.x; w < items; w += gridDim.x, ++done) {
    const Tile t = tile_of(p, a.experts, w);
    barrier_wait(s.staged(), done & 1);
    const int col0 = t.n_tile * kOutCols<kE, kBN>;
    const uint32_t bytes = static_cast<uint32_t>(min(kOutCols<kE, kBN>, a.y_cols - col0) * 2);
    for (int r = lane; r < t.rows; r += 32) {
      bulk_store(a.y + static_cast<int64_t>(t.row0 + r) * a.y_cols + col0, s.staging() + r * Smem<kE, kBN>::kPitch, bytes);
      if (kE == Epilogue::swiglu && a.gate_up != nullptr) {
        T* row = a.gate_up + static_cast<int64_t>(t.row0 + r) * a.n_out + col0;
        const uint8_t* staged = s.gate_up_staging() + r * Smem<kE, kBN>::kGateUpPitch;
        bulk_store(row, staged, bytes);
        bulk_store(row + a.n_out / 2, staged + kBN, bytes);
      }
    }
    bulk_commit();
    bulk_wait_read();
    __syncwarp();
    if (lane == 0) barrier_arrive(s.drained());
  }
  bulk_wait();
}

// Issues one stage's products: the warpgroup's 64 rows x kBN += A (its rows of the
// activation tile) op(B).
template <class T, Epilogue kE, int kBN, bool kTransB>
__device__ __forceinline__ void issue_stage(const Smem<kE, kBN>& s, int stage, int group, float (&acc)[kBN / 8][4],
                                            bool accumulate) {
  const uint64_t a = k_major(s.a(stage) + group * 64 * 128);
  const uint64_t b = kTransB ? mn_major(s.b(stage), kBK * 128) : k_major(s.b(stage));
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kBK / 16; ++kk) {
    const uint64_t bk = kTransB ? mn_step(b, kk) : k_step<kBN * 128>(b, kk);
    // A 256-wide tile is two m64n128 products; its second 128 columns start 16 KB in
    // (128 K-major rows, or two 64-column MN-major panels).
#pragma unroll
    for (int h = 0; h < kBN / 128; ++h)
      mma_ss<T, 128, kTransB ? 1 : 0>(reinterpret_cast<float(&)[16][4]>(acc[16 * h]), k_step<kBM * 128>(a, kk),
                                      bk + ((h * 16384) >> 4), accumulate || kk > 0);
  }
  wgmma_commit();
}

// The epilogue's value of a product pair (col, col + 1) of row `row` (absolute).
template <Epilogue kE>
__device__ __forceinline__ void finish_pair(float& v0, float& v1, const float* row_scale, int row, bool valid) {
  if constexpr (kE == Epilogue::row_scale) {
    const float scale = valid ? row_scale[row] : 0.0f;
    v0 *= scale;
    v1 *= scale;
  }
}

// Writes the tile's results: into the staging buffer for the store partition, or
// straight to global memory.
template <class T, Epilogue kE, int kBN, bool kStores>
__device__ __forceinline__ void epilogue(const Smem<kE, kBN>& s, const Args<T>& a, const Tile& t, int group,
                                         float (&acc)[kBN / 8][4]) {
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int local0 = group * 64 + warp * 16 + lane / 4;  // this thread's first row in the tile
  const int col0 = t.n_tile * kOutCols<kE, kBN>;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int local = local0 + 8 * half, row = t.row0 + local;
    const bool valid = local < t.rows;
#pragma unroll
    for (int n8 = 0; n8 < kOutCols<kE, kBN> / 8; ++n8) {
      const int col = n8 * 8 + 2 * (lane % 4);
      float v0 = acc[n8][2 * half], v1 = acc[n8][2 * half + 1];
      if constexpr (kE == Epilogue::swiglu) {
        const float u0 = acc[n8 + kBN / 16][2 * half], u1 = acc[n8 + kBN / 16][2 * half + 1];
        if (a.gate_up != nullptr) {
          if constexpr (kStores) {
            uint8_t* staged = s.gate_up_staging() + local * Smem<kE, kBN>::kGateUpPitch;
            *reinterpret_cast<uint32_t*>(staged + col * 2) = pack2<T>(v0, v1);
            *reinterpret_cast<uint32_t*>(staged + kBN + col * 2) = pack2<T>(u0, u1);
          } else if (valid && col0 + col < a.y_cols) {
            T* out = a.gate_up + static_cast<int64_t>(row) * a.n_out + col0 + col;
            *reinterpret_cast<uint32_t*>(out) = pack2<T>(v0, v1);
            *reinterpret_cast<uint32_t*>(out + a.n_out / 2) = pack2<T>(u0, u1);
          }
        }
        v0 = Silu::value(v0) * u0;
        v1 = Silu::value(v1) * u1;
      }
      finish_pair<kE>(v0, v1, a.row_scale, row, valid);
      if constexpr (kStores) {
        *reinterpret_cast<uint32_t*>(s.staging() + local * Smem<kE, kBN>::kPitch + col * 2) = pack2<T>(v0, v1);
      } else if (valid && col0 + col < a.y_cols) {
        *reinterpret_cast<uint32_t*>(a.y + static_cast<int64_t>(row) * a.y_cols + col0 + col) = pack2<T>(v0, v1);
      }
    }
  }
}

template <class T, Epilogue kE, int kBN, bool kTransB, bool kStores>
__global__ void __launch_bounds__(kThreads, 1) grouped_m_kernel(const __grid_constant__ Maps maps, Args<T> a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S = Smem<kE, kBN>;
  extern __shared__ uint8_t smem_raw[];
  __shared__ grouped::Plan plan;
  const S s(smem_raw);
  if (threadIdx.x == 32) {
    for (int i = 0; i < S::kStages; ++i) {
      barrier_init(s.full(i), 1);
      barrier_init(s.empty(i), 8);  // one arrival per consumer warp
    }
    barrier_init(s.staged(), 8);
    barrier_init(s.drained(), 1);
    barrier_init_fence();
  }
  const int n_tiles = (a.y_cols + kOutCols<kE, kBN> - 1) / kOutCols<kE, kBN>;
  grouped::make_plan(plan, a.offsets, a.experts, a.rows,
                     [n_tiles](int rows) { return (rows + kBM - 1) / kBM * n_tiles; });
  const int items = plan.first[a.experts];
  if (threadIdx.x < 128) {
    release_registers<kProducerRegisters>();
    if (threadIdx.x == 0)
      load<kE, kBN, kTransB>(s, maps, plan, a.experts, items, a.k, a.w_rows_per_expert, a.n_out / 2);
    else if (kStores && threadIdx.x / 32 == 1)
      drain<T, kE, kBN>(s, a, plan, items);
    return;
  }
  claim_registers<kConsumerRegisters>();
  const int group = threadIdx.x / 128 - 1, k_blocks = (a.k + kBK - 1) / kBK;
  int stage = 0, done = 0;
  for (int w = blockIdx.x; w < items; w += gridDim.x, ++done) {
    const Tile t = tile_of(plan, a.experts, w);
    float acc[kBN / 8][4] = {};
    for (int kb = 0; kb < k_blocks; ++kb, ++stage) {
      barrier_wait(s.full(stage), S::parity(stage));
      issue_stage<T, kE, kBN, kTransB>(s, stage, group, acc, kb > 0);
      // One stage's products stay in flight; the one before has read its tiles.
      if (kb > 0) {
        wgmma_wait<1>();
        if (threadIdx.x % 32 == 0) barrier_arrive(s.empty(stage - 1));
      }
    }
    wgmma_wait<0>();
    pin(acc);
    if (threadIdx.x % 32 == 0) barrier_arrive(s.empty(stage - 1));
    if constexpr (kStores) {
      if (done > 0) barrier_wait(s.drained(), (done - 1) & 1);
    }
    epilogue<T, kE, kBN, kStores>(s, a, t, group, acc);
    if constexpr (kStores) {
      fence_async_shared();  // the bulk copies read the staging buffer through the async proxy
      __syncwarp();
      if (threadIdx.x % 32 == 0) barrier_arrive(s.staged());
    }
  }
#endif
}

// Whether this build and the current card run the kernels, and why not.
void check_supported(const Tensor& x, int experts, const char* op) {
  AMBER_CHECK(grouped_gemm_available(x.device().index), op,
              ": the GPU grouped products run on Hopper (sm_90a) cards in builds with sm_90a code; "
              "run this model on an H100/H200 or on the CPU");
  AMBER_CHECK(x.dtype() == DType::bf16 || x.dtype() == DType::f16, op, ": GPU grouped products take bf16 or f16, got ",
              dtype_name(x.dtype()));
  AMBER_CHECK(experts <= grouped::kMaxExperts, op, ": ", experts, " experts; the GPU kernels plan at most ",
              grouped::kMaxExperts);
  AMBER_CHECK(x.size(0) < (int64_t{1} << 31) - kBM, op, ": ", x.size(0), " rows exceed the kernels' 32-bit row indices");
}

template <class T, Epilogue kE, int kBN, bool kTransB>
void launch_tiles(const Tensor& x, const Tensor& w, const Tensor& offsets, Args<T> a, const char* op) {
  constexpr int w_box = kTransB ? kBK : (kE == Epilogue::swiglu ? kBN / 2 : kBN);
  AMBER_CHECK(a.k % 8 == 0 && a.y_cols % 8 == 0 && a.n_out % 8 == 0, op, ": reduction length ", a.k,
              " and output width ", a.y_cols, " must be multiples of 8 on the GPU (rows start 16-byte aligned)");
  const int n_tiles = (a.y_cols + kOutCols<kE, kBN> - 1) / kOutCols<kE, kBN>;
  const int64_t bound = ((int64_t{a.rows} + kBM - 1) / kBM + a.experts) * n_tiles;  // items, whatever the routing
  if (bound == 0 || a.rows == 0) return;
  const int64_t weight_cols = kTransB ? a.n_out : a.k;
  const Maps maps{swizzled_matrix_map(x, a.rows, a.k, kBM, op),
                  swizzled_matrix_map(w, int64_t{a.experts} * a.w_rows_per_expert, weight_cols, w_box, op)};
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(bound, sm_count()));
  constexpr int smem = Smem<kE, kBN>::kBytes;
  const auto kernel =
      grouped_variant().store_partition ? grouped_m_kernel<T, kE, kBN, kTransB, true> : grouped_m_kernel<T, kE, kBN, kTransB, false>;
  allow_smem(reinterpret_cast<const void*>(kernel), smem, op);
  kernel<<<blocks, kThreads, smem, current_stream()>>>(maps, a);
  check_launch(op, x.shape());
}

// Tiles 256 columns wide where the experts average a 256-row tile's worth of rows and the
// output is that wide: fewer, larger products per byte of shared memory read; else 128.
// SwiGLU stays 128 wide: its two staging buffers at 256 would leave the ring two stages.
template <class T, Epilogue kE, bool kTransB>
void launch(const Tensor& x, const Tensor& w, const Tensor& offsets, Args<T> a, const char* op) {
  const int chosen = grouped_variant().tile_n;
  const bool wide = chosen != 0 ? chosen == 256 : a.n_out >= 256 && int64_t{a.rows} >= int64_t{256} * a.experts;
  if (kE != Epilogue::swiglu && wide)
    launch_tiles<T, kE, kE == Epilogue::swiglu ? 128 : 256, kTransB>(x, w, offsets, a, op);
  else
    launch_tiles<T, kE, 128, kTransB>(x, w, offsets, a, op);
}

template <class Fn>
void with_16bit(const Tensor& x, const char* op, Fn&& fn) {
  if (x.dtype() == DType::bf16)
    fn(__nv_bfloat16{});
  else if (x.dtype() == DType::f16)
    fn(__half{});
  else
    fail(op, ": GPU grouped products take bf16 or f16, got ", dtype_name(x.dtype()));
}

}  // namespace

void grouped_gemm_forward(const Tensor& x, const Tensor& w, const Tensor& offsets, Tensor& y, const Tensor& row_scale) {
  const char* op = "grouped_gemm_forward";
  const int experts = static_cast<int>(w.size(0));
  check_supported(x, experts, op);
  with_16bit(x, op, [&](auto tag) {
    using T = decltype(tag);
    const int n = static_cast<int>(w.size(1));
    const Args<T> a{static_cast<const int*>(offsets.raw()), experts, static_cast<int>(x.size(0)), n,
                    static_cast<int>(x.size(1)), n, static_cast<T*>(y.raw()), n, nullptr,
                    row_scale.defined() ? static_cast<const float*>(row_scale.raw()) : nullptr};
    if (row_scale.defined())
      launch<T, Epilogue::row_scale, false>(x, w, offsets, a, op);
    else
      launch<T, Epilogue::plain, false>(x, w, offsets, a, op);
  });
}

void grouped_gemm_swiglu_forward(const Tensor& x, const Tensor& w, const Tensor& offsets, Tensor& gate_up, Tensor& h) {
  const char* op = "grouped_gemm_swiglu_forward";
  const int experts = static_cast<int>(w.size(0));
  check_supported(x, experts, op);
  with_16bit(x, op, [&](auto tag) {
    using T = decltype(tag);
    const int n = static_cast<int>(w.size(1));
    const Args<T> a{static_cast<const int*>(offsets.raw()), experts, static_cast<int>(x.size(0)), n,
                    static_cast<int>(x.size(1)), n, static_cast<T*>(h.raw()), n / 2,
                    gate_up.defined() ? static_cast<T*>(gate_up.raw()) : nullptr, nullptr};
    launch<T, Epilogue::swiglu, false>(x, w, offsets, a, op);
  });
}

void grouped_gemm_backward_input(const Tensor& dy, const Tensor& w, const Tensor& offsets, Tensor& dx) {
  const char* op = "grouped_gemm_backward_input";
  const int experts = static_cast<int>(w.size(0));
  check_supported(dy, experts, op);
  with_16bit(dy, op, [&](auto tag) {
    using T = decltype(tag);
    const int n = static_cast<int>(w.size(1)), k = static_cast<int>(w.size(2));
    const Args<T> a{static_cast<const int*>(offsets.raw()), experts, static_cast<int>(dy.size(0)), k, n, n,
                    static_cast<T*>(dx.raw()), k, nullptr, nullptr};
    launch<T, Epilogue::plain, true>(dy, w, offsets, a, op);
  });
}

bool grouped_gemm_available(int device) {
#if defined(AMBER_HOPPER_KERNELS)
  return compute_major(device) == 9;
#else
  (void)device;
  return false;
#endif
}

GroupedVariant& grouped_variant() {
  static GroupedVariant variant;
  return variant;
}

}  // namespace amber::cuda
