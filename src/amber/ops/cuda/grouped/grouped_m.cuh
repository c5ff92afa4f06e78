// The m-grouped kernel on Hopper (sm_90a): y[rows of e] = x[rows of e] op(w_e), for the
// forward (op = transpose, w [E, N, K]) and the input gradient (op = identity, w read as
// [reduction, output]), with 16-bit operands or e4m3 ones carrying f32 block scales
// (1x128 along an activation row, 128x128 of a weight: the DeepSeek-V3 recipe). A
// persistent block walks the (expert, n-tile, m-tile) items of the device plan
// (grouped_tiles.cuh) in a fixed round robin, so a launch depends on the buffers' shapes
// only and a captured graph replays with any routing.
//
// Roles: warp 0 is the loader (TMA copies of the activation and weight tiles into a ring
// of stages, each completing on an mbarrier); warp 1 the store partition, draining
// finished tiles from a shared staging buffer by TMA stores (an expert's last rows by
// 16-byte copies, so rows of the next expert are never written; SwiGLU's h is stored by
// the consumer warps through their own scratch blocks, as are all three outputs of
// SwiGLU's backward, whose warp 1 loads each tile's gate and up columns instead); warp 2
// the scale loader of FP8 operands, filling a ring of its own, deeper than the tiles'
// (with kSplit false the loader warp copies the scales beside its tiles instead); two
// consumer warpgroups of 64 rows run the wgmma
// products and the epilogue. FP8 products of one 128-wide k-block land in a fresh
// accumulator that is scaled into the fp32 total (the promotion that keeps Hopper's
// reduced-precision FP8 accumulation short). With kStores false the consumers store
// from registers themselves. kStores and kSplit exist for the A/B of the seed's two
// ideas (docs/perf/grouped_gemm.md).
#pragma once

#include <algorithm>

#include "amber/core/stream.h"
#include "amber/ops/cuda/activation/glu_math.cuh"
#include "amber/ops/cuda/common/common.cuh"
#include "amber/ops/cuda/common/tensor_map.h"
#include "amber/ops/cuda/common/wgmma.cuh"
#include "amber/ops/cuda/grouped/grouped_gemm.h"
#include "amber/ops/cuda/grouped/grouped_tiles.cuh"

namespace amber::cuda::grouped {

using namespace hopper;

// swiglu_backward: the input gradient of the down projection (da, never stored) goes
// through the MoE SwiGLU's backward with the gate weights folded in (ops/moe.h,
// moe_swiglu_backward): gate and up come into shared memory by TMA beside the tile.
enum class Epilogue { plain, row_scale, swiglu, swiglu_backward };

// Operand formats: 16-bit values of T (64 per 128-byte row), or e4m3 values (128 per
// row) with f32 block scales, writing bf16.
template <class T>
struct Plain {
  using Out = T;
  static constexpr bool kScaled = false;
  static constexpr int kBK = 64;
};
struct Fp8 {
  using Out = __nv_bfloat16;
  static constexpr bool kScaled = true;
  static constexpr int kBK = 128;
};

constexpr int kBM = 128;       // rows of a tile (two consumers of 64); its columns: kBN, 128 or 256
constexpr int kThreads = 384;  // loader/store warpgroup + two consumers
constexpr int kConsumerRegisters = 232, kProducerRegisters = 40;
constexpr int kScratchBlockBytes = 16 * 32 * 2;  // SwiGLU's h: a consumer warp's 16 rows x 32 columns

// Output columns of a tile: SwiGLU halves the product's.
template <Epilogue kE, int kBN>
constexpr int kOutCols = kE == Epilogue::swiglu ? kBN / 2 : kBN;

// Shared memory: the ring's stages (activation tile, then weight tile, 128-byte rows),
// the staging buffer of a tile's kBN product columns in 64-column panels of the 128-byte
// swizzle (the layout TMA stores read; the consumers' fragment writes fall in distinct
// banks; SwiGLU: gate_up's gate half, then its up half), SwiGLU's h scratch (a 16 x 32
// block per consumer warp; SwiGLU's backward: three, after its tile of gate and of up),
// FP8 scale slots (a tile's row scales, then its two column halves' weight scales), then
// the barriers.
template <class F, Epilogue kE, int kBN, bool kSplit>
struct Smem {
  static constexpr int kABytes = kBM * 128, kBBytes = kBN * 128, kStageBytes = kABytes + kBBytes;
  static constexpr int kPanelBytes = kBM * 128, kPanels = kBN / 64;
  static constexpr bool kBackward = kE == Epilogue::swiglu_backward;
  // SwiGLU's backward stages nothing; its tile of gate and of up takes the room instead.
  static constexpr int kStagingBytes = kBackward ? 0 : kPanels * kPanelBytes;
  static constexpr int kOperandBytes = kBackward ? 2 * kPanels * kPanelBytes : 0;
  static constexpr int kScratchBytes = kE == Epilogue::swiglu ? 8 * kScratchBlockBytes
                                       : kBackward            ? 3 * 8 * kScratchBlockBytes
                                                              : 0;
  static constexpr int kScaleSlotBytes = F::kScaled ? kBM * 4 + 16 : 0;
  static constexpr int kRoom = 227 * 1024 - 1024 - static_cast<int>(sizeof(Plan)) - 512;
  static constexpr int kStages =
      (kRoom - kStagingBytes - kOperandBytes - kScratchBytes) / (kStageBytes + 2 * kScaleSlotBytes);
  // The scale loader runs ahead by twice the tiles' depth (its slots are small).
  static constexpr int kScaleStages = F::kScaled ? (kSplit ? 2 * kStages : kStages) : 0;
  static constexpr int kScalesOffset = kStages * kStageBytes + kStagingBytes + kOperandBytes + kScratchBytes;
  static constexpr int kBarrierOffset = kScalesOffset + kScaleStages * kScaleSlotBytes;
  static constexpr int kBytes = kBarrierOffset + 8 * (2 * kStages + 4 + 2 * kScaleStages) + 1024;  // +1024: alignment
  static_assert(kStages >= 3, "the ring needs at least three stages");
  static_assert(kBytes + static_cast<int>(sizeof(Plan)) <= 227 * 1024, "shared memory");

  uint8_t* base;
  __device__ explicit Smem(uint8_t* raw) : base(raw + ((1024 - smem_address(raw) % 1024) % 1024)) {}
  __device__ uint8_t* a(int stage) const { return base + (stage % kStages) * kStageBytes; }
  __device__ uint8_t* b(int stage) const { return a(stage) + kABytes; }
  __device__ uint8_t* staging() const { return base + kStages * kStageBytes; }
  // SwiGLU's backward: the tile's gate columns, then its up columns, as staged.
  __device__ uint8_t* gate_in() const { return staging() + kStagingBytes; }
  __device__ uint8_t* up_in() const { return gate_in() + kPanels * kPanelBytes; }
  __device__ uint8_t* scratch(int block) const {
    return staging() + kStagingBytes + kOperandBytes + block * kScratchBlockBytes;
  }
  __device__ float* scales(int slot) const {
    return reinterpret_cast<float*>(base + kScalesOffset + (slot % kScaleStages) * kScaleSlotBytes);
  }
  __device__ uint64_t* full(int stage) const {
    return reinterpret_cast<uint64_t*>(base + kBarrierOffset) + stage % kStages;
  }
  __device__ uint64_t* empty(int stage) const { return full(0) + kStages + stage % kStages; }
  __device__ uint64_t* staged() const { return full(0) + 2 * kStages; }
  __device__ uint64_t* drained() const { return staged() + 1; }
  // SwiGLU's backward: the gate/up tile arrived, and every consumer warp is done with it.
  __device__ uint64_t* operands_full() const { return drained() + 1; }
  __device__ uint64_t* operands_free() const { return drained() + 2; }
  __device__ uint64_t* scale_full(int slot) const { return drained() + 3 + slot % kScaleStages; }
  __device__ uint64_t* scale_empty(int slot) const { return drained() + 3 + kScaleStages + slot % kScaleStages; }
  __device__ static int parity(int stage) { return (stage / kStages) & 1; }
  __device__ static int scale_parity(int slot) { return (slot / kScaleStages) & 1; }
};

template <class Out>
struct Args {
  const int* offsets;
  int experts, rows;      // rows: of x and y
  int n_out, k;           // output columns of the product (before SwiGLU), reduction length
  int w_rows_per_expert;  // rows of one expert's weight matrix in the 2-D map
  Out* y;                 // [rows, y_cols]
  int y_cols;
  Out* gate_up;           // SwiGLU: [rows, n_out], or null
  Out* dgate_up;          // SwiGLU's backward: [rows, 2 y_cols] (y is act_w, row_scale the gate weights)
  float* row_dots;        // and the gate weights' gradient, a partial sum per row and n-tile: [rows, n_tiles]
  const float* row_scale;
  const float* x_scales;  // FP8: [rows, k_blocks] and [experts, n_blocks, k_blocks], the
  const float* w_scales;  // latter at any strides (a transposed view serves w^T)
  int k_blocks, n_blocks;
  int64_t w_scale_expert, w_scale_row, w_scale_col;
};

struct Maps {
  // y and gate_up ([rows, 2, n_out / 2]) for the store partition; SwiGLU's backward
  // reads gate_up through a [rows, 2 y_cols] map instead.
  CUtensorMap x, w, y, gate_up;
};

// Where (row, col) of a staged tile lives: 64-column panels of 128-byte rows, whose
// 16-byte chunks are permuted by the row (TMA's 128-byte swizzle).
__device__ __forceinline__ uint8_t* staged_at(uint8_t* panels, int row, int col) {
  return panels + (col / 64) * (kBM * 128) + row * 128 + ((((col % 64) / 8) ^ (row % 8)) * 16) + (col % 8) * 2;
}

// Where (row, col) of a 16 x 32 scratch block lives: 64-byte rows whose 16-byte chunks
// are permuted by the row pair, so the eight rows of an stmatrix write fall in distinct
// banks.
__device__ __forceinline__ uint8_t* scratch_at(uint8_t* block, int row, int col) {
  return block + row * 64 + (((col / 8) ^ ((row / 2) % 4)) * 16) + (col % 8) * 2;
}

// Hands a consumer warp's full scratch block to store(row, chunk, value), its 16 rows
// of four 16-byte chunks two a lane, between the warp's syncs (the block's writes before,
// its next writes after).
template <class Store>
__device__ __forceinline__ void flush_scratch(uint8_t* block, Store&& store) {
  const int lane = threadIdx.x % 32;
  __syncwarp();
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int id = i * 32 + lane, r = id / 4, chunk = id % 4;
    store(r, chunk, *reinterpret_cast<const uint4*>(scratch_at(block, r, chunk * 8)));
  }
  __syncwarp();
}

// A work item: expert e, the tile's first row (absolute) and its rows of the expert,
// and its n-tile.
struct Tile {
  int e, row0, rows, n_tile;
};

__device__ __forceinline__ Tile tile_of(const Plan& p, int experts, int w) {
  const int e = expert_of(p, experts, w);
  const int m_tiles = (p.count[e] + kBM - 1) / kBM, r = w - p.first[e];
  const int i = r % m_tiles;
  return Tile{e, p.begin[e] + i * kBM, min(kBM, p.count[e] - i * kBM), r / m_tiles};
}

// One k-block's FP8 scales into a slot by cp.async, a lane's share: the tile's row scales
// (rows past the buffer repeat its last) and, by lanes 0 and 1, the weight scales of the
// tile's two column halves (SwiGLU's gate and up rows lie in different weight blocks).
template <class Out, Epilogue kE, int kBN>
__device__ __forceinline__ void copy_scales(float* slot, const Args<Out>& a, const Tile& t, int kb, int lane) {
  for (int r = lane; r < kBM; r += 32)
    cp_async_4(slot + r, a.x_scales + static_cast<int64_t>(min(t.row0 + r, a.rows - 1)) * a.k_blocks + kb);
  if (lane < 2) {
    // A 256-wide tile's second half lies in the next weight block (past N: the last one,
    // whose scale then multiplies zeros).
    const int first_row = kE == Epilogue::swiglu ? (lane == 0 ? 0 : a.n_out / 2) + t.n_tile * (kBN / 2)
                                                 : t.n_tile * kBN + lane * (kBN / 2);
    const int row_block = min(first_row / 128, a.n_blocks - 1);
    cp_async_4(slot + kBM + lane,
               a.w_scales + t.e * a.w_scale_expert + row_block * a.w_scale_row + kb * a.w_scale_col);
  }
}

// The loader warp: every stage of every tile of this block (lane 0 the TMA copies; with
// FP8 operands and kSplit false every lane copies scales into the stage's slot too).
template <class F, Epilogue kE, int kBN, bool kTransB, bool kSplit>
__device__ void load(const Smem<F, kE, kBN, kSplit>& s, const Maps& maps, const Args<typename F::Out>& a,
                     const Plan& p, int items) {
  using S = Smem<F, kE, kBN, kSplit>;
  constexpr bool kCopiesScales = F::kScaled && !kSplit;
  const int lane = threadIdx.x % 32, k_blocks = (a.k + F::kBK - 1) / F::kBK;
  if (!kCopiesScales && lane != 0) return;
  int stage = 0;
  for (int w = blockIdx.x; w < items; w += gridDim.x) {
    const Tile t = tile_of(p, a.experts, w);
    const int w_row = t.e * a.w_rows_per_expert;
    for (int kb = 0; kb < k_blocks; ++kb, ++stage) {
      if (stage >= S::kStages) barrier_wait(s.empty(stage), S::parity(stage) ^ 1);
      if (lane == 0) {
        barrier_expect(s.full(stage), S::kStageBytes);
        tma_load(s.a(stage), maps.x, kb * F::kBK, t.row0, s.full(stage));
        if constexpr (kTransB) {
          // [reduction rows, output columns]: 64-column panels of kBK rows.
          for (int panel = 0; panel < kBN / 64; ++panel)
            tma_load(s.b(stage) + panel * F::kBK * 128, maps.w, t.n_tile * kBN + panel * 64, w_row + kb * F::kBK,
                     s.full(stage));
        } else if constexpr (kE == Epilogue::swiglu) {
          // The gate's rows of this tile, then the same rows of the up half.
          tma_load(s.b(stage), maps.w, kb * F::kBK, w_row + t.n_tile * (kBN / 2), s.full(stage));
          tma_load(s.b(stage) + (kBN / 2) * 128, maps.w, kb * F::kBK, w_row + a.n_out / 2 + t.n_tile * (kBN / 2),
                   s.full(stage));
        } else {
          tma_load(s.b(stage), maps.w, kb * F::kBK, w_row + t.n_tile * kBN, s.full(stage));
        }
      }
      if constexpr (kCopiesScales) {
        copy_scales<typename F::Out, kE, kBN>(s.scales(stage), a, t, kb, lane);
        barrier_arrive_after_copies(s.full(stage));
      }
    }
  }
}

// The scale loader warp (FP8, kSplit): the scales of every k-block into its own ring.
template <class F, Epilogue kE, int kBN>
__device__ void load_scales(const Smem<F, kE, kBN, true>& s, const Args<typename F::Out>& a, const Plan& p,
                            int items) {
  using S = Smem<F, kE, kBN, true>;
  const int lane = threadIdx.x % 32, k_blocks = (a.k + F::kBK - 1) / F::kBK;
  int slot = 0;
  for (int w = blockIdx.x; w < items; w += gridDim.x) {
    const Tile t = tile_of(p, a.experts, w);
    for (int kb = 0; kb < k_blocks; ++kb, ++slot) {
      if (slot >= S::kScaleStages) barrier_wait(s.scale_empty(slot), S::scale_parity(slot) ^ 1);
      copy_scales<typename F::Out, kE, kBN>(s.scales(slot), a, t, kb, lane);
      barrier_arrive_after_copies(s.scale_full(slot));
    }
  }
}

// The store partition (one warp): each finished tile (SwiGLU: its gate_up, when kept) by
// TMA stores of its panels, or, for a tile holding fewer rows than it could (the
// expert's last), its valid rows copied 16 bytes a lane, so rows of the next expert are
// never written; then the staging buffer is handed back.
template <class F, Epilogue kE, int kBN, bool kSplit>
__device__ void drain(const Smem<F, kE, kBN, kSplit>& s, const Maps& maps, const Args<typename F::Out>& a,
                      const Plan& p, int items) {
  using S = Smem<F, kE, kBN, kSplit>;
  const int lane = threadIdx.x % 32;
  const bool gate_up = kE == Epilogue::swiglu && a.gate_up != nullptr;
  // The valid rows and columns of one staged output: `panels` panels at `at`, to `out`
  // (row pitch `pitch`, columns from col0, at most `cols` of them).
  const auto copy_rows = [&](uint8_t* at, int panels, auto* out, int pitch, int col0, int cols, const Tile& t) {
    const int chunks = min(panels * 64, cols - col0) / 8;  // 16-byte chunks of a row
    for (int i = lane; i < t.rows * chunks; i += 32) {
      const int r = i / chunks, chunk = i % chunks;
      const uint4 v = *reinterpret_cast<const uint4*>(staged_at(at, r, chunk * 8));
      *reinterpret_cast<uint4*>(out + static_cast<int64_t>(t.row0 + r) * pitch + col0 + chunk * 8) = v;
    }
  };
  int done = 0;
  for (int w = blockIdx.x; w < items; w += gridDim.x, ++done) {
    const Tile t = tile_of(p, a.experts, w);
    barrier_wait(s.staged(), done & 1);
    const int col0 = t.n_tile * kOutCols<kE, kBN>, half = a.n_out / 2;
    constexpr int kHalfPanels = S::kPanels / 2;  // SwiGLU: gate_up's panels of one half
    uint8_t* const up_staging = s.staging() + kHalfPanels * S::kPanelBytes;
    if (t.rows == kBM) {
      if (lane == 0 && (kE != Epilogue::swiglu || gate_up)) {
        for (int panel = 0; panel < S::kPanels; ++panel) {
          uint8_t* const at = s.staging() + panel * S::kPanelBytes;
          if constexpr (kE == Epilogue::swiglu)
            tma_store(maps.gate_up, at, col0 + panel % kHalfPanels * 64, panel / kHalfPanels, t.row0);
          else
            tma_store(maps.y, at, col0 + panel * 64, t.row0);
        }
        bulk_commit();
        bulk_wait_read();
      }
    } else if (kE != Epilogue::swiglu) {
      copy_rows(s.staging(), S::kPanels, a.y, a.y_cols, col0, a.y_cols, t);
    } else if (gate_up) {
      copy_rows(s.staging(), kHalfPanels, a.gate_up, a.n_out, col0, half, t);
      copy_rows(up_staging, kHalfPanels, a.gate_up + half, a.n_out, col0, half, t);
    }
    __syncwarp();
    if (lane == 0) barrier_arrive(s.drained());
  }
  if (lane == 0) bulk_wait();
}

// SwiGLU's backward, warp 1: each tile's gate and up columns into shared memory by TMA
// (rows past the buffer arrive as zeros), once every consumer warp is done with the
// last tile's.
template <class F, Epilogue kE, int kBN, bool kSplit>
__device__ void load_operands(const Smem<F, kE, kBN, kSplit>& s, const Maps& maps, const Args<typename F::Out>& a,
                              const Plan& p, int items) {
  using S = Smem<F, kE, kBN, kSplit>;
  if (threadIdx.x % 32 != 0) return;
  int done = 0;
  for (int w = blockIdx.x; w < items; w += gridDim.x, ++done) {
    const Tile t = tile_of(p, a.experts, w);
    if (done > 0) barrier_wait(s.operands_free(), (done - 1) & 1);
    barrier_expect(s.operands_full(), S::kOperandBytes);
    for (int panel = 0; panel < S::kPanels; ++panel) {
      const int col = t.n_tile * kBN + panel * 64;
      tma_load(s.gate_in() + panel * S::kPanelBytes, maps.gate_up, col, t.row0, s.operands_full());
      tma_load(s.up_in() + panel * S::kPanelBytes, maps.gate_up, a.y_cols + col, t.row0, s.operands_full());
    }
  }
}

// Issues one stage's 16-bit products: the warpgroup's 64 rows x kBN += A (its rows of the
// activation tile) op(B), one m64n128 or m64n256 product per 16 k.
template <class T, int kBN, bool kTransB, class S>
__device__ __forceinline__ void issue_stage(const S& s, int stage, int group, float (&acc)[kBN / 8][4],
                                            bool accumulate) {
  const uint64_t a = k_major(s.a(stage) + group * 64 * 128);
  const uint64_t b = kTransB ? mn_major(s.b(stage), 64 * 128) : k_major(s.b(stage));
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const uint64_t ak = k_step<kBM * 128>(a, kk), bk = kTransB ? mn_step(b, kk) : k_step<kBN * 128>(b, kk);
    if constexpr (kBN == 256)
      mma_ss_n256<T, kTransB ? 1 : 0>(acc, ak, bk, accumulate || kk > 0);
    else
      mma_ss<T, 128, kTransB ? 1 : 0>(acc, ak, bk, accumulate || kk > 0);
  }
  wgmma_commit();
}

// Writes the tile's results: into the staging buffer for the store partition (by
// stmatrix, two 8-column groups of both row halves an instruction), or straight to
// global memory. SwiGLU stages gate_up only (h staged beside it would leave a 256-wide
// tile's ring two stages); each consumer warp writes h 32 columns at a time through its
// own scratch block, 64-byte row segments a lane pair, not 4-byte pairs a lane.
template <class Out, Epilogue kE, int kBN, bool kStores, class S>
__device__ __forceinline__ void epilogue(const S& s, const Args<Out>& a, const Tile& t, int group,
                                         float (&acc)[kBN / 8][4]) {
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int local0 = group * 64 + warp * 16 + lane / 4;  // this thread's first row in the tile
  const int col0 = t.n_tile * kOutCols<kE, kBN>;
  const bool gate_up = kE == Epilogue::swiglu && a.gate_up != nullptr;
  float scale[2] = {1.0f, 1.0f};
  if constexpr (kE == Epilogue::row_scale)
    for (int half = 0; half < 2; ++half)
      if (local0 + 8 * half < t.rows) scale[half] = a.row_scale[t.row0 + local0 + 8 * half];
  // Output pair q of n8 (rows local0 + 8 half, cols n8 * 8 + 2 (lane % 4), +1), and the
  // gate/up pairs it comes from.
  const auto pair = [&](int n8, int half, uint32_t& gate, uint32_t& up) {
    float v0 = acc[n8][2 * half], v1 = acc[n8][2 * half + 1];
    if constexpr (kE == Epilogue::swiglu) {
      const float u0 = acc[n8 + kBN / 16][2 * half], u1 = acc[n8 + kBN / 16][2 * half + 1];
      gate = pack2<Out>(v0, v1);
      up = pack2<Out>(u0, u1);
      v0 = Silu::value(v0) * u0;
      v1 = Silu::value(v1) * u1;
    }
    if constexpr (kE == Epilogue::row_scale) {
      v0 *= scale[half];
      v1 *= scale[half];
    }
    return pack2<Out>(v0, v1);
  };
  if constexpr (kStores) {
    // Lanes 8m .. 8m+7 address matrix m: rows + 8 (m % 2), columns + 8 (m / 2).
    const int m = lane / 8, row = group * 64 + warp * 16 + (m % 2) * 8 + lane % 8;
#pragma unroll
    for (int n8 = 0; n8 < kOutCols<kE, kBN> / 8; n8 += 2) {
      uint32_t out[4], gates[4], ups[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) out[q] = pair(n8 + q / 2, q % 2, gates[q], ups[q]);
      const int col = (n8 + m / 2) * 8;
      if constexpr (kE == Epilogue::swiglu) {
        if (gate_up) {
          stmatrix_x4(staged_at(s.staging(), row, col), gates[0], gates[1], gates[2], gates[3]);
          stmatrix_x4(staged_at(s.staging(), row, kBN / 2 + col), ups[0], ups[1], ups[2], ups[3]);
        }
        uint8_t* const block = s.scratch(group * 4 + warp);
        stmatrix_x4(scratch_at(block, row % 16, col % 32), out[0], out[1], out[2], out[3]);
        if (n8 % 4 == 2)  // the block is full: 16 rows x 32 columns
          flush_scratch(block, [&](int r, int chunk, uint4 v) {
            const int local = group * 64 + warp * 16 + r, c = col0 + (n8 - 2) * 8 + chunk * 8;
            if (local < t.rows && c < a.y_cols)
              *reinterpret_cast<uint4*>(a.y + static_cast<int64_t>(t.row0 + local) * a.y_cols + c) = v;
          });
      } else {
        stmatrix_x4(staged_at(s.staging(), row, col), out[0], out[1], out[2], out[3]);
      }
    }
  } else {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int local = local0 + 8 * half, row = t.row0 + local;
      if (local >= t.rows) continue;
#pragma unroll
      for (int n8 = 0; n8 < kOutCols<kE, kBN> / 8; ++n8) {
        const int col = n8 * 8 + 2 * (lane % 4);
        if (col0 + col >= a.y_cols) continue;
        uint32_t gate = 0, up = 0;
        const uint32_t out = pair(n8, half, gate, up);
        *reinterpret_cast<uint32_t*>(a.y + static_cast<int64_t>(row) * a.y_cols + col0 + col) = out;
        if (gate_up) {
          Out* g = a.gate_up + static_cast<int64_t>(row) * a.n_out + col0 + col;
          *reinterpret_cast<uint32_t*>(g) = gate;
          *reinterpret_cast<uint32_t*>(g + a.n_out / 2) = up;
        }
      }
    }
  }
}

// SwiGLU's backward from the tile of da in the accumulators, for each element with g, u
// its gate and up (read from the staged tile by ldmatrix, which hands a lane the
// accumulators' (row, column pair)), w the row's gate weight, act = silu(g) u:
// act_w = w act, dgate = w da u silu'(g), dup = w da silu(g), and the row's partial dot
// da . act over the tile's columns (a quad's lanes hold a row: two shuffles). The three
// outputs leave through three scratch blocks a consumer warp, as SwiGLU's h does.
template <class Out, int kBN, class S>
__device__ __forceinline__ void swiglu_backward_epilogue(const S& s, const Args<Out>& a, const Tile& t, int group,
                                                         float (&acc)[kBN / 8][4]) {
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int local0 = group * 64 + warp * 16 + lane / 4;
  const int col0 = t.n_tile * kBN, width = a.y_cols;
  float weight[2], dot[2] = {0.0f, 0.0f};
#pragma unroll
  for (int half = 0; half < 2; ++half)
    weight[half] = local0 + 8 * half < t.rows ? a.row_scale[t.row0 + local0 + 8 * half] : 0.0f;
  // Lanes 8m .. 8m+7 address matrix m: rows + 8 (m % 2), columns + 8 (m / 2).
  const int m = lane / 8, row = group * 64 + warp * 16 + (m % 2) * 8 + lane % 8;
  uint8_t* const blocks = s.scratch(3 * (group * 4 + warp));  // act_w, dgate, dup
#pragma unroll
  for (int n8 = 0; n8 < kBN / 8; n8 += 2) {
    const int col = (n8 + m / 2) * 8;
    uint32_t gates[4], ups[4], outs[3][4];
    ldmatrix_x4(gates, staged_at(s.gate_in(), row, col));
    ldmatrix_x4(ups, staged_at(s.up_in(), row, col));
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int half = q % 2;
      const float* d = acc[n8 + q / 2] + 2 * half;
      float g[2], u[2], act_w[2], dgate[2], dup[2];
      unpack2<Out>(gates[q], g);
      unpack2<Out>(ups[q], u);
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float silu = Silu::value(g[e]), act = silu * u[e], dw = weight[half] * d[e];
        dot[half] += d[e] * act;
        act_w[e] = weight[half] * act;
        dgate[e] = dw * u[e] * Silu::derivative(g[e]);
        dup[e] = dw * silu;
      }
      outs[0][q] = pack2<Out>(act_w[0], act_w[1]);
      outs[1][q] = pack2<Out>(dgate[0], dgate[1]);
      outs[2][q] = pack2<Out>(dup[0], dup[1]);
    }
#pragma unroll
    for (int o = 0; o < 3; ++o)
      stmatrix_x4(scratch_at(blocks + o * kScratchBlockBytes, row % 16, col % 32), outs[o][0], outs[o][1],
                  outs[o][2], outs[o][3]);
    if (n8 % 4 == 2) {
      // The blocks are full: 16 rows x 32 columns each.
      const auto to = [&](Out* out, int64_t pitch) {
        return [&, out, pitch](int r, int chunk, uint4 v) {
          const int local = group * 64 + warp * 16 + r;
          if (local < t.rows)
            *reinterpret_cast<uint4*>(out + (t.row0 + local) * pitch + col0 + (n8 - 2) * 8 + chunk * 8) = v;
        };
      };
      flush_scratch(blocks, to(a.y, width));
      flush_scratch(blocks + kScratchBlockBytes, to(a.dgate_up, 2 * width));
      flush_scratch(blocks + 2 * kScratchBlockBytes, to(a.dgate_up + width, 2 * width));
    }
  }
  const int n_tiles = width / kBN;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float v = dot[half];
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    v += __shfl_xor_sync(0xffffffffu, v, 2);
    const int local = local0 + 8 * half;
    if (lane % 4 == 0 && local < t.rows) a.row_dots[(t.row0 + local) * int64_t{n_tiles} + t.n_tile] = v;
  }
}

// One tile's products, 16-bit: one stage's products stay in flight while the next
// stage's are issued; each stage is handed back once the products after it are issued.
template <class F, int kBN, bool kTransB, class S>
__device__ __forceinline__ void products(const S& s, int k_blocks, int group, int& stage, int&,
                                         float (&acc)[kBN / 8][4]) {
  for (int kb = 0; kb < k_blocks; ++kb, ++stage) {
    barrier_wait(s.full(stage), S::parity(stage));
    issue_stage<typename F::Out, kBN, kTransB>(s, stage, group, acc, kb > 0);
    if (kb > 0) {
      wgmma_wait<1>();
      if (threadIdx.x % 32 == 0) barrier_arrive(s.empty(stage - 1));
    }
  }
  wgmma_wait<0>();
  pin(acc);
  if (threadIdx.x % 32 == 0) barrier_arrive(s.empty(stage - 1));
}

// One tile's products, FP8: each 128-wide k-block's product lands in a fresh accumulator
// and is added to the total scaled by the row's and the weight block's scales; a
// 256-wide tile runs its two 128-column halves one after the other through the same
// fresh accumulator (both at once would not fit the registers). (Two accumulators
// alternating, so that one block's product would run while the previous one is scaled
// in, measured slower on long reductions: docs/perf/grouped_gemm.md.)
template <class F, int kBN, bool kTransB, bool kSplit, class S>
__device__ __forceinline__ void scaled_products(const S& s, int k_blocks, int group, int& stage, int& slot,
                                                float (&acc)[kBN / 8][4]) {
  static_assert((kBN == 128 || kBN == 256) && !kTransB, "FP8 tiles are 128 or 256 wide, weights K-major");
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int local0 = group * 64 + warp * 16 + lane / 4;
  for (int kb = 0; kb < k_blocks; ++kb, ++stage, ++slot) {
    barrier_wait(s.full(stage), S::parity(stage));
    const uint64_t a = k_major(s.a(stage) + group * 64 * 128);
    float row0 = 0.0f, row1 = 0.0f, w_lo = 0.0f, w_hi = 0.0f;
#pragma unroll
    for (int half = 0; half < kBN / 128; ++half) {
      float part[16][4];
      const uint64_t b = k_major(s.b(stage) + half * 128 * 128);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) mma_ss_e4m3(part, k_step<kBM * 128>(a, kk), k_step<kBN * 128>(b, kk), kk > 0);
      wgmma_commit();
      if (half == 0) {
        // The scales are read while the products run.
        if constexpr (kSplit) barrier_wait(s.scale_full(slot), S::scale_parity(slot));
        const float* sc = s.scales(kSplit ? slot : stage);
        row0 = sc[local0], row1 = sc[local0 + 8], w_lo = sc[kBM], w_hi = sc[kBM + 1];
        if constexpr (kSplit) {
          __syncwarp();
          if (lane == 0) barrier_arrive(s.scale_empty(slot));
        }
      }
      wgmma_wait<0>();
      pin(part);
      if (half == kBN / 128 - 1 && lane == 0) barrier_arrive(s.empty(stage));
#pragma unroll
      for (int n8 = 0; n8 < 16; ++n8) {
        // Columns below kBN / 2 take the first weight block's scale (SwiGLU: the gate's).
        const float w = half * 16 + n8 < kBN / 16 ? w_lo : w_hi;
        float(&total)[4] = acc[half * 16 + n8];
        total[0] += part[n8][0] * (row0 * w);
        total[1] += part[n8][1] * (row0 * w);
        total[2] += part[n8][2] * (row1 * w);
        total[3] += part[n8][3] * (row1 * w);
      }
    }
  }
}

template <class F, Epilogue kE, int kBN, bool kTransB, bool kStores, bool kSplit>
__global__ void __launch_bounds__(kThreads, 1)
    grouped_m_kernel(const __grid_constant__ Maps maps, Args<typename F::Out> a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S = Smem<F, kE, kBN, kSplit>;
  extern __shared__ uint8_t smem_raw[];
  __shared__ Plan plan;
  const S s(smem_raw);
  if (threadIdx.x == 32) {
    for (int i = 0; i < S::kStages; ++i) {
      barrier_init(s.full(i), F::kScaled && !kSplit ? 1 + 32 : 1);  // + the loader lanes' scale copies
      barrier_init(s.empty(i), 8);                                 // one arrival per consumer warp
    }
    if constexpr (F::kScaled)
      for (int i = 0; i < S::kScaleStages; ++i) {
        barrier_init(s.scale_full(i), 32);
        barrier_init(s.scale_empty(i), 8);
      }
    barrier_init(s.staged(), 8);
    barrier_init(s.drained(), 1);
    barrier_init(s.operands_full(), 1);
    barrier_init(s.operands_free(), 8);
    barrier_init_fence();
  }
  const int n_tiles = (a.y_cols + kOutCols<kE, kBN> - 1) / kOutCols<kE, kBN>;
  make_plan(plan, a.offsets, a.experts, a.rows, [n_tiles](int rows) { return (rows + kBM - 1) / kBM * n_tiles; });
  const int items = plan.first[a.experts];
  if (threadIdx.x < 128) {
    release_registers<kProducerRegisters>();
    const int warp = threadIdx.x / 32;
    if (warp == 0)
      load<F, kE, kBN, kTransB, kSplit>(s, maps, a, plan, items);
    else if constexpr (kE == Epilogue::swiglu_backward) {
      if (warp == 1) load_operands<F, kE, kBN, kSplit>(s, maps, a, plan, items);
    } else if (kStores && warp == 1)
      drain<F, kE, kBN, kSplit>(s, maps, a, plan, items);
    else if constexpr (F::kScaled && kSplit)
      if (warp == 2) load_scales<F, kE, kBN>(s, a, plan, items);
    return;
  }
  claim_registers<kConsumerRegisters>();
  const int group = threadIdx.x / 128 - 1, k_blocks = (a.k + F::kBK - 1) / F::kBK;
  int stage = 0, slot = 0, done = 0;
  for (int w = blockIdx.x; w < items; w += gridDim.x, ++done) {
    const Tile t = tile_of(plan, a.experts, w);
    float acc[kBN / 8][4] = {};
    if constexpr (F::kScaled)
      scaled_products<F, kBN, kTransB, kSplit>(s, k_blocks, group, stage, slot, acc);
    else
      products<F, kBN, kTransB>(s, k_blocks, group, stage, slot, acc);
    if constexpr (kE == Epilogue::swiglu_backward) {
      barrier_wait(s.operands_full(), done & 1);
      swiglu_backward_epilogue<typename F::Out, kBN>(s, a, t, group, acc);
      __syncwarp();
      if (threadIdx.x % 32 == 0) barrier_arrive(s.operands_free());
    } else {
      if constexpr (kStores) {
        if (done > 0) barrier_wait(s.drained(), (done - 1) & 1);
      }
      epilogue<typename F::Out, kE, kBN, kStores>(s, a, t, group, acc);
      if constexpr (kStores) {
        fence_async_shared();  // the bulk copies read the staging buffer through the async proxy
        __syncwarp();
        if (threadIdx.x % 32 == 0) barrier_arrive(s.staged());
      }
    }
  }
#endif
}

// Whether this build and the current card run the kernels, and why not.
inline void check_supported(const Tensor& x, int experts, const char* op) {
  AMBER_CHECK(grouped_gemm_available(x.device().index), op,
              ": the GPU grouped products run on Hopper (sm_90a) cards in builds with sm_90a code; "
              "run this model on an H100/H200 or on the CPU");
  AMBER_CHECK(experts <= kMaxExperts, op, ": ", experts, " experts; the GPU kernels plan at most ", kMaxExperts);
  AMBER_CHECK(x.size(0) < (int64_t{1} << 31) - kBM, op, ": ", x.size(0), " rows exceed the kernels' 32-bit row indices");
}

// Tiles 256 columns wide where the experts average a 256-row tile's worth of rows and the
// output is that wide (fewer, larger products per byte of shared memory read), unless
// the last 256-wide tile would leave more than an eighth of the output's width computed
// for nothing (384 = 1.5 tiles: the Kohaku-MoE-1B down projection's input gradient ran
// 0.184 ms at 256 against 0.152 at 128 on an H100; 5760 = 22.5 tiles stays 256); else
// 128. The benchmarks' variant can force either. A 256-wide SwiGLU tile takes 128
// rows of each half's weights: past a half's end they are the next half's (or expert's)
// rows, whose products land in columns never stored, so 16-bit weights take any half
// width (gpt-oss's 2880 = 22.5 x 128: its SwiGLU forward at 32768 tokens took 8.87 ms on
// 128-wide tiles, the plain forward of the same shape 6.30 on 256-wide ones). FP8 ones
// need halves a multiple of 128: a tile half reads one weight block's scale.
template <class F, Epilogue kE>
bool wide_tiles(const Args<typename F::Out>& a) {
  const int chosen = grouped_variant().tile_n;
  const bool fits = kE != Epilogue::swiglu || !F::kScaled || a.y_cols % 128 == 0;
  if (chosen != 0) return chosen == 256 && fits;
  const int wasted = (256 - a.n_out % 256) % 256;
  return fits && a.n_out >= 256 && int64_t{a.rows} >= int64_t{256} * a.experts && 8 * wasted <= a.n_out;
}

template <class F, Epilogue kE, int kBN, bool kTransB>
void launch_tiles(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor* gate_up, Args<typename F::Out> a,
                  const char* op) {
  constexpr int w_box = kTransB ? F::kBK : (kE == Epilogue::swiglu ? kBN / 2 : kBN);
  constexpr int kElementsPer16Bytes = 16 * F::kBK / 128;
  AMBER_CHECK(a.k % kElementsPer16Bytes == 0 && a.y_cols % 8 == 0 && a.n_out % 8 == 0, op, ": reduction length ",
              a.k, " and output width ", a.y_cols, " must be multiples of ", kElementsPer16Bytes,
              " and 8 on the GPU (rows start 16-byte aligned)");
  const int n_tiles = (a.y_cols + kOutCols<kE, kBN> - 1) / kOutCols<kE, kBN>;
  const int64_t bound = ((int64_t{a.rows} + kBM - 1) / kBM + a.experts) * n_tiles;  // items, whatever the routing
  if (bound == 0 || a.rows == 0) return;
  const int64_t weight_cols = kTransB ? a.n_out : a.k;
  const CUtensorMap y_map = swizzled_matrix_map(y, a.rows, a.y_cols, kBM, op);
  Maps maps{swizzled_matrix_map(x, a.rows, a.k, kBM, op),
            swizzled_matrix_map(w, int64_t{a.experts} * a.w_rows_per_expert, weight_cols, w_box, op), y_map, {}};
  if constexpr (kE == Epilogue::swiglu_backward)
    maps.gate_up = swizzled_matrix_map(*gate_up, a.rows, 2 * a.y_cols, kBM, op);
  else if (a.gate_up != nullptr)
    maps.gate_up = swizzled_parts_map(*gate_up, a.rows, 2, a.n_out / 2, kBM, op);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(bound, sm_count()));
  const GroupedVariant v = grouped_variant();
  const auto run = [&](auto kernel, int smem) {
    allow_smem(reinterpret_cast<const void*>(kernel), smem, op);
    kernel<<<blocks, kThreads, smem, current_stream()>>>(maps, a);
  };
  if constexpr (F::kScaled) {
    if (v.store_partition && v.split_scales)
      run(grouped_m_kernel<F, kE, kBN, kTransB, true, true>, Smem<F, kE, kBN, true>::kBytes);
    else if (v.store_partition)
      run(grouped_m_kernel<F, kE, kBN, kTransB, true, false>, Smem<F, kE, kBN, false>::kBytes);
    else if (v.split_scales)
      run(grouped_m_kernel<F, kE, kBN, kTransB, false, true>, Smem<F, kE, kBN, true>::kBytes);
    else
      run(grouped_m_kernel<F, kE, kBN, kTransB, false, false>, Smem<F, kE, kBN, false>::kBytes);
  } else if (v.store_partition) {
    run(grouped_m_kernel<F, kE, kBN, kTransB, true, false>, Smem<F, kE, kBN, false>::kBytes);
  } else {
    run(grouped_m_kernel<F, kE, kBN, kTransB, false, false>, Smem<F, kE, kBN, false>::kBytes);
  }
  check_launch(op, x.shape());
}

}  // namespace amber::cuda::grouped
