// What the Hopper attention kernels share. Each block has one producer warpgroup and
// two consumer warpgroups of 64 rows. The block "owns" a tile of one or two tensors
// (Q; Q and dO; K and V), copied once, and streams tiles of two other tensors through
// a ring of stages (K and V; Q and dO), every copy a TMA box completing on an mbarrier.
// A consumer warp hands a stage back by arriving on its "empty" barrier. Tiles are
// rows of 64-element panels in the 128-byte swizzle (wgmma.cuh).
#pragma once

#include "amber/ops/cuda/attention/attention_tc.cuh"
#include "amber/ops/cuda/common/tensor_map.h"
#include "amber/ops/cuda/common/wgmma.cuh"

namespace amber::cuda::hopper {

constexpr int kConsumers = 2, kThreads = 128 * (kConsumers + 1), kOwnRows = 64 * kConsumers;

// Registers per thread after setmaxnreg, within the 512 a thread slot has: a 24-register
// producer beside two 240-register consumers, or 32 beside three of 160 (a 512-thread
// block enters with 128 each).
template <int kGroups>
constexpr int kConsumerRegisters = kGroups == 2 ? 240 : 160;
template <int kGroups>
constexpr int kProducerRegisters = kGroups == 2 ? 24 : 32;

// Tensor maps of the owned tensors (boxes of kOwnRows rows) and the streamed ones.
struct Maps {
  CUtensorMap own[2], stream[2];
};

// Maps for tensors of [T, heads, D]; the second owned map is left unused with kOwn = 1.
template <int kOwn>
Maps make_maps(const Tensor& own0, const Tensor& own1, const Tensor& stream0, const Tensor& stream1,
               int stream_rows, const char* op, int own_rows = kOwnRows) {
  Maps m{};
  m.own[0] = swizzled_rows_map(own0, own_rows, op);
  if constexpr (kOwn == 2) m.own[1] = swizzled_rows_map(own1, own_rows, op);
  m.stream[0] = swizzled_rows_map(stream0, stream_rows, op);
  m.stream[1] = swizzled_rows_map(stream1, stream_rows, op);
  return m;
}

// The most stages (up to 4) whose tiles fit in a block's 227 KB of shared memory
// beside the owned tiles, the barriers, the alignment slack and `kReserveBytes` the
// kernel keeps for itself.
template <int D, int kOwn, int kStreamRows, int kExtraBytes = 0, int kReserveBytes = 0, int kGroups = kConsumers>
constexpr int ring_stages() {
  constexpr int stage = (2 * kStreamRows * D * 2 + kExtraBytes + 1023) / 1024 * 1024;
  constexpr int room = 227 * 1024 - 2048 - kOwn * 64 * kGroups * D * 2 - kReserveBytes;
  return room / stage < 4 ? room / stage : 4;
}

// Shared memory: owned tiles (64 rows per consumer warpgroup, kGroups of them), then
// per stage (kStages of them in the ring) two streamed tiles and `kExtraBytes` the
// kernel adds (row statistics), then the barriers.
template <int D, int kOwn, int kStreamRows, int kStages, int kExtraBytes = 0, int kGroups = kConsumers>
struct Ring {
  static constexpr int kPanels = D / 64, kRows = 64 * kGroups;
  static constexpr int kOwnBytes = kRows * D * 2, kOwnPanelBytes = kRows * 128;
  static constexpr int kStreamBytes = kStreamRows * D * 2, kStreamPanelBytes = kStreamRows * 128;
  static constexpr int kStageBytes = (2 * kStreamBytes + kExtraBytes + 1023) / 1024 * 1024;  // tiles stay aligned
  static constexpr int kBarrierOffset = kOwn * kOwnBytes + kStages * kStageBytes;
  static constexpr int kEndOffset = kBarrierOffset + 8 * (2 + 2 * kStages);
  static constexpr int kSmemBytes = kEndOffset + 1024;  // +1024: alignment of the tiles

  uint8_t* base;
  // Aligned by pointer arithmetic on the shared array itself, so the compiler still
  // knows every address below is shared memory and emits shared loads and stores
  // (through an integer cast it fell back to generic ones).
  __device__ explicit Ring(uint8_t* raw) : base(raw + ((1024 - smem_address(raw) % 1024) % 1024)) {}
  __device__ uint8_t* own(int i) const { return base + i * kOwnBytes; }
  __device__ uint8_t* stream(int stage, int i) const {
    return base + kOwn * kOwnBytes + (stage % kStages) * kStageBytes + i * kStreamBytes;
  }
  __device__ uint8_t* extra(int stage) const { return stream(stage, 2); }
  __device__ uint64_t* own_full() const { return reinterpret_cast<uint64_t*>(base + kBarrierOffset); }
  __device__ uint64_t* full(int stage) const { return own_full() + 1 + stage % kStages; }
  __device__ uint64_t* empty(int stage) const { return own_full() + 1 + kStages + stage % kStages; }
  // A persistent block's consumers hand the owned tiles back once their last product
  // has read them, so the next tile's may load behind the epilogue.
  __device__ uint64_t* own_empty() const { return own_full() + 1 + 2 * kStages; }
  __device__ static int parity(int stage) { return (stage / kStages) & 1; }
  // Before refilling: waits until the consumers are done with the stage's last use.
  __device__ void wait_free(int stage) const {
    if (stage >= kStages) barrier_wait(empty(stage), parity(stage) ^ 1);
  }

  // By one thread, then a block barrier. `loaders` more arrivals complete each full
  // barrier (threads that fill the extra bytes).
  __device__ void init(int loaders) const {
    if (threadIdx.x == 0) {
      barrier_init(own_full(), 1);
      for (int s = 0; s < kStages; ++s) {
        barrier_init(full(s), 1 + loaders);
        barrier_init(empty(s), 4 * kGroups);  // one arrival per consumer warp
      }
      barrier_init(own_empty(), 4 * kGroups);
      barrier_init_fence();
    }
    __syncthreads();
  }

  // Splits the block by warpgroup for kernels with a producer and nothing else
  // beside the consumers: the producer warpgroup gives its registers back, its first
  // thread runs produce(), and it gets false; the consumers take the registers and get
  // true.
  __device__ bool consumer(const Maps& maps, int own_head, int64_t own_row, int stream_head, int64_t first_row,
                           int stages) const {
    if (threadIdx.x >= 128) {
      claim_registers<kConsumerRegisters<kGroups>>();
      return true;
    }
    release_registers<kProducerRegisters<kGroups>>();
    if (threadIdx.x == 0)
      produce(maps, own_head, static_cast<int>(own_row), stream_head, static_cast<int>(first_row), stages);
    return false;
  }

  // The producer thread: the owned tiles at row own_row of head own_head, then
  // `stages` streamed tiles from row first_row of head stream_head (rows absolute) into
  // the ring's stages first_stage on (a persistent block's stages count on across its
  // tiles).
  __device__ void produce(const Maps& maps, int own_head, int own_row, int stream_head, int first_row, int stages,
                          int first_stage = 0) const {
    load_own(maps, own_head, own_row);
    for (int s = 0; s < stages; ++s) load_stage(maps, first_stage + s, stream_head, first_row + s * kStreamRows);
  }
  __device__ void load_own(const Maps& maps, int head, int row) const {
    barrier_expect(own_full(), kOwn * kOwnBytes);
    for (int i = 0; i < kOwn; ++i)
      for (int p = 0; p < kPanels; ++p)
        tma_load(own(i) + p * kOwnPanelBytes, maps.own[i], head * D + p * 64, row, own_full());
  }
  // Once the stage is free: the streamed tiles at row `row` (absolute) of `head`.
  __device__ void load_stage(const Maps& maps, int stage, int head, int row) const {
    wait_free(stage);
    barrier_expect(full(stage), 2 * kStreamBytes);
    for (int i = 0; i < 2; ++i)
      for (int p = 0; p < kPanels; ++p)
        tma_load(stream(stage, i) + p * kStreamPanelBytes, maps.stream[i], head * D + p * 64, row, full(stage));
  }
};

// Issues c (the warpgroup's 64 rows x N) = A B^T with A (64 rows of the K-major tile
// a) and B (N rows of the K-major tile b), both D wide.
template <class T, int D, int N, int kAPanelBytes, int kBPanelBytes>
__device__ __forceinline__ void product_abt(float (&c)[N / 8][4], uint64_t a, uint64_t b) {
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
    mma_ss<T, N, 0>(c, k_step<kAPanelBytes>(a, kk), k_step<kBPanelBytes>(b, kk), kk > 0);
}

// P (64 x K, accumulators) rounded to T as the A operand of a register-sourced wgmma.
template <class T, int K>
__device__ __forceinline__ void to_operand(const float (&p)[K / 8][4], uint32_t (&a)[K / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) accumulators_to_a<T>(p[2 * kk], p[2 * kk + 1], a[kk]);
}

// Issues c (64 x D) += A B with A (64 x K) in registers (to_operand) and B the K rows
// of the MN-major tile b.
template <class T, int K, int D>
__device__ __forceinline__ void product_ab(float (&c)[D / 8][4], const uint32_t (&a)[K / 16][4], uint64_t b) {
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) mma_rs<T, D, 1>(c, a[kk], mn_step(b, kk), true);
}

// Issues c (64 x D) += P B with P (64 x K) held as accumulators (rounded to T here).
template <class T, int K, int D>
__device__ __forceinline__ void product_pb(float (&c)[D / 8][4], const float (&p)[K / 8][4], uint64_t b) {
  uint32_t a[K / 16][4];
  to_operand<T, K>(p, a);
  product_ab<T, K, D>(c, a, b);
}

// 2^x in one instruction; results below the smallest normal float flush to zero,
// far under what a softmax weight can contribute.
__device__ __forceinline__ float exp2_fast(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

struct Exp2Fast {
  __device__ __forceinline__ float operator()(float x) const { return exp2_fast(x); }
};

// The issued products complete; their accumulators may be read.
template <class... Acc>
__device__ __forceinline__ void complete(Acc&... acc) {
  wgmma_commit();
  wgmma_wait<0>();
  (pin(acc), ...);
}

}  // namespace amber::cuda::hopper
