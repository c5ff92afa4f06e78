// The k-grouped product on Hopper (sm_90a): the weight gradient dw_e [N, K] (f32) =
// dy_e^T x_e, reduced over each expert's rows. Every expert has the same tiles (N/128 x
// K/kBK, kBK 256 where K is a multiple of 256: one m64n256 product per 16 rows instead of
// two m64n128 that read dy's panel twice; else 128), so the items are a fixed grid that
// persistent blocks deal among themselves (below); an item's reduction length is its
// expert's row count, read from the device plan. One loader thread streams 64-row
// chunks of dy and x (both read as MN-major wgmma operands, no transpose pass) through a
// ring of stages; two consumer warpgroups own 64 gradient rows each. A chunk that runs
// past the expert's rows holds the next expert's rows (or TMA's zeros): each consumer
// zeroes those rows of its own dy panel before its products. Asked for, each warp also
// sums the squares of what it stores, per 128 columns (the gradient norm's blocks,
// ops/grouped_gemm.h), so the step's norm need not read the gradient again.
#include <algorithm>

#include "amber/core/stream.h"
#include "amber/ops/cuda/common/common.cuh"
#include "amber/ops/cuda/common/tensor_map.h"
#include "amber/ops/cuda/common/wgmma.cuh"
#include "amber/ops/cuda/grouped/grouped_gemm.h"
#include "amber/ops/cuda/grouped/grouped_tiles.cuh"

namespace amber::cuda {
namespace {

using namespace hopper;

constexpr int kBN = 128, kChunk = 64;  // gradient rows of a tile; rows reduced per stage
constexpr int kThreads = 384;
constexpr int kConsumerRegisters = 232, kProducerRegisters = 40;

// kBK: gradient columns of a tile, 128 or 256.
template <int kBK>
struct Smem {
  static constexpr int kPanelBytes = kChunk * 128;  // 64 reduction rows x 64 columns
  static constexpr int kDyBytes = kBN * kChunk * 2, kXBytes = kBK * kChunk * 2, kStageBytes = kDyBytes + kXBytes;
  static constexpr int kStatic = static_cast<int>(sizeof(grouped::Plan) + sizeof(int) * grouped::kMaxExperts);
  static constexpr int kRoom = 227 * 1024 - 1024 - kStatic - 256;
  static constexpr int kStages = kRoom / kStageBytes < 8 ? kRoom / kStageBytes : 8;
  static constexpr int kBarrierOffset = kStages * kStageBytes;
  static constexpr int kBytes = kBarrierOffset + 8 * 2 * kStages + 1024;

  uint8_t* base;
  __device__ explicit Smem(uint8_t* raw) : base(raw + ((1024 - smem_address(raw) % 1024) % 1024)) {}
  __device__ uint8_t* dy(int stage) const { return base + (stage % kStages) * kStageBytes; }
  __device__ uint8_t* x(int stage) const { return dy(stage) + kDyBytes; }
  __device__ uint64_t* full(int stage) const {
    return reinterpret_cast<uint64_t*>(base + kBarrierOffset) + stage % kStages;
  }
  __device__ uint64_t* empty(int stage) const { return full(0) + kStages + stage % kStages; }
  __device__ static int parity(int stage) { return (stage / kStages) & 1; }
};

struct Maps {
  CUtensorMap dy, x;
};

struct Args {
  const int* offsets;
  int experts, rows, n, k;
  float* dw;         // [experts, n, k]
  double* squares;   // [experts, 8 ceil(n / 128), ceil(k / 128)] or null
  bool accumulate;
};

// An item's reduction is its expert's rows, so items differ in length by the routing's
// skew; a round robin over items in expert order left the blocks that drew a busy
// expert's items last (Kohaku's shapes under skewed routing ran 23-44% longer than
// under uniform). Items are walked busiest expert first (`order`: experts by rows,
// descending, ties by index) and dealt to the blocks in a snake, each round in the other
// direction, which evens the blocks' sums as longest-first dealing does (skewed routing
// then costs 4-8%). Each tile still has one block and one reduction order, so the bits
// do not depend on the schedule.
struct Tile {
  int e, n_tile, k_tile;
};

// The i-th item of that order.
__device__ __forceinline__ Tile tile_of(const int* order, int i, int n_tiles, int k_tiles) {
  const int per_expert = n_tiles * k_tiles, r = i % per_expert;
  return Tile{order[i / per_expert], r / k_tiles, r % k_tiles};
}

// This block's item of round q (increasing in q, so a block stops at its first item past
// the end).
__device__ __forceinline__ int snake_item(int q) {
  return q * static_cast<int>(gridDim.x) + (q % 2 == 0 ? blockIdx.x : gridDim.x - 1 - blockIdx.x);
}

// order[0 .. experts): the experts by rows, descending, ties by index; by every thread
// of the block, then a block barrier.
__device__ __forceinline__ void sort_by_rows(const grouped::Plan& plan, int experts, int* order) {
  for (int e = threadIdx.x; e < experts; e += blockDim.x) {
    const int c = plan.count[e];
    int rank = 0;
    for (int o = 0; o < experts; ++o) rank += plan.count[o] > c || (plan.count[o] == c && o < e);
    order[rank] = e;
  }
  __syncthreads();
}

template <int kBK>
__global__ void __launch_bounds__(kThreads, 1) grouped_k_kernel(const __grid_constant__ Maps maps, Args a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S = Smem<kBK>;
  extern __shared__ uint8_t smem_raw[];
  __shared__ grouped::Plan plan;
  const S s(smem_raw);
  if (threadIdx.x == 32) {
    for (int i = 0; i < S::kStages; ++i) {
      barrier_init(s.full(i), 1);
      barrier_init(s.empty(i), 8);  // one arrival per consumer warp
    }
    barrier_init_fence();
  }
  __shared__ int order[grouped::kMaxExperts];
  grouped::make_plan(plan, a.offsets, a.experts, a.rows, [](int) { return 0; });
  sort_by_rows(plan, a.experts, order);
  const int n_tiles = (a.n + kBN - 1) / kBN, k_tiles = (a.k + kBK - 1) / kBK;
  const int items = a.experts * n_tiles * k_tiles;
  if (threadIdx.x < 128) {
    release_registers<kProducerRegisters>();
    if (threadIdx.x != 0) return;
    int stage = 0;
    for (int q = 0, i = snake_item(0); i < items; i = snake_item(++q)) {
      const Tile t = tile_of(order, i, n_tiles, k_tiles);
      const int begin = plan.begin[t.e], chunks = (plan.count[t.e] + kChunk - 1) / kChunk;
      for (int c = 0; c < chunks; ++c, ++stage) {
        if (stage >= S::kStages) barrier_wait(s.empty(stage), S::parity(stage) ^ 1);
        barrier_expect(s.full(stage), S::kStageBytes);
        const int row = begin + c * kChunk;
        for (int p = 0; p < kBN / 64; ++p)
          tma_load(s.dy(stage) + p * S::kPanelBytes, maps.dy, t.n_tile * kBN + p * 64, row, s.full(stage));
        for (int p = 0; p < kBK / 64; ++p)
          tma_load(s.x(stage) + p * S::kPanelBytes, maps.x, t.k_tile * kBK + p * 64, row, s.full(stage));
      }
    }
    return;
  }
  claim_registers<kConsumerRegisters>();
  const int group = threadIdx.x / 128 - 1, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  int stage = 0;
  for (int q = 0, i = snake_item(0); i < items; i = snake_item(++q)) {
    const Tile t = tile_of(order, i, n_tiles, k_tiles);
    const int count = plan.count[t.e], chunks = (count + kChunk - 1) / kChunk;
    if (chunks == 0 && a.accumulate) continue;  // adds nothing
    float acc[kBK / 8][4] = {};
    for (int c = 0; c < chunks; ++c, ++stage) {
      barrier_wait(s.full(stage), S::parity(stage));
      uint8_t* dy_panel = s.dy(stage) + group * S::kPanelBytes;
      const int valid = count - c * kChunk;
      if (valid < kChunk) {
        // Rows past the expert: a row of a swizzled panel is 128 contiguous bytes.
        const int local = threadIdx.x % 128;
        for (int i = valid * 8 + local; i < kChunk * 8; i += 128)
          reinterpret_cast<uint4*>(dy_panel)[i] = make_uint4(0, 0, 0, 0);
        fence_async_shared();
        named_sync(1 + group, 128);
      }
      const uint64_t da = mn_major(dy_panel, S::kPanelBytes), db = mn_major(s.x(stage), S::kPanelBytes);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kChunk / 16; ++kk) {
        if constexpr (kBK == 256)
          mma_ss_n256<__nv_bfloat16, 1, 1>(acc, mn_step(da, kk), mn_step(db, kk), c > 0 || kk > 0);
        else
          mma_ss<__nv_bfloat16, kBK, 1, 1>(acc, mn_step(da, kk), mn_step(db, kk), c > 0 || kk > 0);
      }
      wgmma_commit();
      if (c > 0) {
        wgmma_wait<1>();
        if (lane == 0) barrier_arrive(s.empty(stage - 1));
      }
    }
    // Waited for on every path, so the compiler sees the products complete before the
    // epilogue reads them (a conditional wait made ptxas serialize the products).
    wgmma_wait<0>();
    pin(acc);
    if (chunks > 0 && lane == 0) barrier_arrive(s.empty(stage - 1));
    const int row0 = t.n_tile * kBN + group * 64 + warp * 16 + lane / 4;
    float squares[kBK / 128] = {};
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = row0 + 8 * half;
      if (row >= a.n) continue;
      float* out = a.dw + (static_cast<int64_t>(t.e) * a.n + row) * a.k + t.k_tile * kBK;
#pragma unroll
      for (int n8 = 0; n8 < kBK / 8; ++n8) {
        const int col = n8 * 8 + 2 * (lane % 4);
        if (t.k_tile * kBK + col >= a.k) continue;
        float2 v = make_float2(acc[n8][2 * half], acc[n8][2 * half + 1]);
        if (a.accumulate) {
          const float2 old = *reinterpret_cast<const float2*>(out + col);
          v.x += old.x;
          v.y += old.y;
        }
        *reinterpret_cast<float2*>(out + col) = v;
        squares[n8 / 16] += v.x * v.x + v.y * v.y;
      }
    }
    if (a.squares) {
      // This warp's 16 rows, one sum per 128 columns.
      const int k_blocks = (a.k + 127) / 128;
#pragma unroll
      for (int b = 0; b < kBK / 128; ++b) {
        double sum = squares[b];
#pragma unroll
        for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
        const int k_block = t.k_tile * (kBK / 128) + b;
        const int64_t row_block = static_cast<int64_t>(t.e) * n_tiles * 8 + t.n_tile * 8 + group * 4 + warp;
        if (lane == 0 && k_block < k_blocks) a.squares[row_block * k_blocks + k_block] = sum;
      }
    }
  }
#endif
}

}  // namespace

void grouped_gemm_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& offsets, Tensor& dw,
                                  bool accumulate, Tensor* squares) {
  const char* op = "grouped_gemm_backward_weight";
  AMBER_CHECK(grouped_gemm_available(x.device().index), op, ": the GPU grouped products run on Hopper (sm_90a) cards in builds with sm_90a code; "
                      "run this model on an H100/H200 or on the CPU");
  AMBER_CHECK(x.dtype() == DType::bf16 && dw.dtype() == DType::f32, op,
              ": the GPU weight gradient takes bf16 operands into an f32 gradient, got ", dtype_name(x.dtype()),
              " into ", dtype_name(dw.dtype()));
  const int64_t experts = dw.size(0), n = dw.size(1), k = dw.size(2), rows = x.size(0);
  AMBER_CHECK(experts <= grouped::kMaxExperts, op, ": ", experts, " experts; the GPU kernels plan at most ",
              grouped::kMaxExperts);
  AMBER_CHECK(n % 8 == 0 && k % 8 == 0, op, ": gradient ", dw.shape(), " needs widths that are multiples of 8");
  // 256-wide tiles where they divide K (a partial one would compute half its products
  // on zeros); the benchmarks' variant can force either width.
  const int chosen = grouped_variant().tile_n;
  const int width = chosen != 0 ? chosen : k % 256 == 0 ? 256 : 128;
  const int64_t items = experts * ((n + kBN - 1) / kBN) * ((k + width - 1) / width);
  AMBER_CHECK(rows < (int64_t{1} << 31) - kChunk && items < (int64_t{1} << 31), op, ": ", rows, " rows and ", items,
              " tiles exceed the kernel's 32-bit indices");
  if (rows == 0 && !accumulate) {
    dw.zero();
    if (squares) squares->zero();
  }
  if (items == 0 || rows == 0) return;
  const Maps maps{swizzled_matrix_map(dy, rows, n, kChunk, op), swizzled_matrix_map(x, rows, k, kChunk, op)};
  const Args a{static_cast<const int*>(offsets.raw()), static_cast<int>(experts), static_cast<int>(rows),
               static_cast<int>(n), static_cast<int>(k), static_cast<float*>(dw.raw()),
               squares ? static_cast<double*>(squares->raw()) : nullptr, accumulate};
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(items, sm_count()));
  const auto launch = [&]<int kBK>() {
    allow_smem(reinterpret_cast<const void*>(grouped_k_kernel<kBK>), Smem<kBK>::kBytes, op);
    grouped_k_kernel<kBK><<<blocks, kThreads, Smem<kBK>::kBytes, current_stream()>>>(maps, a);
  };
  if (width == 256)
    launch.template operator()<256>();
  else
    launch.template operator()<128>();
  check_launch(op, dw.shape());
}

}  // namespace amber::cuda
