// Hopper (sm_90a) primitives: warpgroup matrix products (wgmma) with operands in
// shared memory in the 128-byte swizzle, mbarriers, and bulk tensor copies (TMA) that
// complete on them. The operand layout every tile here uses: rows of 64 16-bit elements
// (128 bytes), 8-row atoms of 1024 bytes, swizzled as TMA's SWIZZLE_128B writes them,
// each tile 1024-byte aligned; a head_dim of 128 is two such panels side by side.
// The accumulator of m64nN is acc[N / 8][4] per thread, warp w of the warpgroup holding
// rows 16w .. 16w + 15 in the mma.sync m16n8 layout (mma.cuh), so fragments, masks and
// the softmax code are shared with the portable kernels.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "amber/ops/cuda/common/mma.cuh"

namespace amber::cuda::hopper {

// A descriptor of a 128-byte-swizzled operand at p. K-major (rows hold k): sbo = 1024,
// the step between 8-row atoms; lbo is unused. MN-major (rows hold m or n, one row per
// k): sbo = 1024, the step between groups of 8 k; lbo = the step between 64-wide
// panels of m or n.
__device__ __forceinline__ uint64_t sw128_desc(const void* p, uint32_t lbo, uint32_t sbo) {
  const uint64_t address = smem_address(p);
  return ((address & 0x3FFFF) >> 4) | (static_cast<uint64_t>(lbo >> 4) << 16) |
         (static_cast<uint64_t>(sbo >> 4) << 32) | (uint64_t{1} << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int pending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(pending) : "memory");
}

// Pins accumulator registers at this point of the program: the compiler sees the
// asynchronous products only as the asm statements that issue them, so reads and
// writes of the accumulators must not move across a wait or a fence.
template <int N>
__device__ __forceinline__ void pin(float (&acc)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(acc[i][e])::"memory");
}

#define AMBER_WGMMA_SS_N64(TY)                                                        \
  asm volatile(                                                                      \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                  \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "    \
      "%32, %33, p, 1, 1, %35, %36;\n}\n"                                           \
      : "+f"(c[0][0]), "+f"(c[0][1]), "+f"(c[0][2]), "+f"(c[0][3]), "+f"(c[1][0]), "+f"(c[1][1]), "+f"(c[1][2]), "+f"(c[1][3]), \
      "+f"(c[2][0]), "+f"(c[2][1]), "+f"(c[2][2]), "+f"(c[2][3]), "+f"(c[3][0]), "+f"(c[3][1]), "+f"(c[3][2]), "+f"(c[3][3]), \
      "+f"(c[4][0]), "+f"(c[4][1]), "+f"(c[4][2]), "+f"(c[4][3]), "+f"(c[5][0]), "+f"(c[5][1]), "+f"(c[5][2]), "+f"(c[5][3]), \
      "+f"(c[6][0]), "+f"(c[6][1]), "+f"(c[6][2]), "+f"(c[6][3]), "+f"(c[7][0]), "+f"(c[7][1]), "+f"(c[7][2]), "+f"(c[7][3]) \
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)), "n"(kTransA), "n"(kTransB))

#define AMBER_WGMMA_RS_N64(TY)                                                        \
  asm volatile(                                                                      \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                  \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "    \
      "{%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"                      \
      : "+f"(c[0][0]), "+f"(c[0][1]), "+f"(c[0][2]), "+f"(c[0][3]), "+f"(c[1][0]), "+f"(c[1][1]), "+f"(c[1][2]), "+f"(c[1][3]), \
      "+f"(c[2][0]), "+f"(c[2][1]), "+f"(c[2][2]), "+f"(c[2][3]), "+f"(c[3][0]), "+f"(c[3][1]), "+f"(c[3][2]), "+f"(c[3][3]), \
      "+f"(c[4][0]), "+f"(c[4][1]), "+f"(c[4][2]), "+f"(c[4][3]), "+f"(c[5][0]), "+f"(c[5][1]), "+f"(c[5][2]), "+f"(c[5][3]), \
      "+f"(c[6][0]), "+f"(c[6][1]), "+f"(c[6][2]), "+f"(c[6][3]), "+f"(c[7][0]), "+f"(c[7][1]), "+f"(c[7][2]), "+f"(c[7][3]) \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(static_cast<int>(accumulate)), "n"(kTransB))

#define AMBER_WGMMA_SS_N128(TY)                                                        \
  asm volatile(                                                                      \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                  \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "    \
      "%64, %65, p, 1, 1, %67, %68;\n}\n"                                           \
      : "+f"(c[0][0]), "+f"(c[0][1]), "+f"(c[0][2]), "+f"(c[0][3]), "+f"(c[1][0]), "+f"(c[1][1]), "+f"(c[1][2]), "+f"(c[1][3]), \
      "+f"(c[2][0]), "+f"(c[2][1]), "+f"(c[2][2]), "+f"(c[2][3]), "+f"(c[3][0]), "+f"(c[3][1]), "+f"(c[3][2]), "+f"(c[3][3]), \
      "+f"(c[4][0]), "+f"(c[4][1]), "+f"(c[4][2]), "+f"(c[4][3]), "+f"(c[5][0]), "+f"(c[5][1]), "+f"(c[5][2]), "+f"(c[5][3]), \
      "+f"(c[6][0]), "+f"(c[6][1]), "+f"(c[6][2]), "+f"(c[6][3]), "+f"(c[7][0]), "+f"(c[7][1]), "+f"(c[7][2]), "+f"(c[7][3]), \
      "+f"(c[8][0]), "+f"(c[8][1]), "+f"(c[8][2]), "+f"(c[8][3]), "+f"(c[9][0]), "+f"(c[9][1]), "+f"(c[9][2]), "+f"(c[9][3]), \
      "+f"(c[10][0]), "+f"(c[10][1]), "+f"(c[10][2]), "+f"(c[10][3]), "+f"(c[11][0]), "+f"(c[11][1]), "+f"(c[11][2]), "+f"(c[11][3]), \
      "+f"(c[12][0]), "+f"(c[12][1]), "+f"(c[12][2]), "+f"(c[12][3]), "+f"(c[13][0]), "+f"(c[13][1]), "+f"(c[13][2]), "+f"(c[13][3]), \
      "+f"(c[14][0]), "+f"(c[14][1]), "+f"(c[14][2]), "+f"(c[14][3]), "+f"(c[15][0]), "+f"(c[15][1]), "+f"(c[15][2]), "+f"(c[15][3]) \
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)), "n"(kTransA), "n"(kTransB))

#define AMBER_WGMMA_RS_N128(TY)                                                        \
  asm volatile(                                                                      \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                  \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "    \
      "{%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"                      \
      : "+f"(c[0][0]), "+f"(c[0][1]), "+f"(c[0][2]), "+f"(c[0][3]), "+f"(c[1][0]), "+f"(c[1][1]), "+f"(c[1][2]), "+f"(c[1][3]), \
      "+f"(c[2][0]), "+f"(c[2][1]), "+f"(c[2][2]), "+f"(c[2][3]), "+f"(c[3][0]), "+f"(c[3][1]), "+f"(c[3][2]), "+f"(c[3][3]), \
      "+f"(c[4][0]), "+f"(c[4][1]), "+f"(c[4][2]), "+f"(c[4][3]), "+f"(c[5][0]), "+f"(c[5][1]), "+f"(c[5][2]), "+f"(c[5][3]), \
      "+f"(c[6][0]), "+f"(c[6][1]), "+f"(c[6][2]), "+f"(c[6][3]), "+f"(c[7][0]), "+f"(c[7][1]), "+f"(c[7][2]), "+f"(c[7][3]), \
      "+f"(c[8][0]), "+f"(c[8][1]), "+f"(c[8][2]), "+f"(c[8][3]), "+f"(c[9][0]), "+f"(c[9][1]), "+f"(c[9][2]), "+f"(c[9][3]), \
      "+f"(c[10][0]), "+f"(c[10][1]), "+f"(c[10][2]), "+f"(c[10][3]), "+f"(c[11][0]), "+f"(c[11][1]), "+f"(c[11][2]), "+f"(c[11][3]), \
      "+f"(c[12][0]), "+f"(c[12][1]), "+f"(c[12][2]), "+f"(c[12][3]), "+f"(c[13][0]), "+f"(c[13][1]), "+f"(c[13][2]), "+f"(c[13][3]), \
      "+f"(c[14][0]), "+f"(c[14][1]), "+f"(c[14][2]), "+f"(c[14][3]), "+f"(c[15][0]), "+f"(c[15][1]), "+f"(c[15][2]), "+f"(c[15][3]) \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(static_cast<int>(accumulate)), "n"(kTransB))

// c (64 x N) = (accumulate ? c : 0) + A B, A (64 x 16) and B (16 x N) described in
// shared memory; kTransB = 1 when B is MN-major (rows of n, one per k), kTransA = 1
// when A is (rows of m, one per k).
template <class T, int N, int kTransB, int kTransA = 0>
__device__ __forceinline__ void mma_ss(float (&c)[N / 8][4], uint64_t a, uint64_t b, bool accumulate) {
  static_assert(N == 64 || N == 128, "m64n64 or m64n128");
  if constexpr (N == 64) {
    if constexpr (__is_same(T, __nv_bfloat16)) AMBER_WGMMA_SS_N64("bf16");
    else AMBER_WGMMA_SS_N64("f16");
  } else {
    if constexpr (__is_same(T, __nv_bfloat16)) AMBER_WGMMA_SS_N128("bf16");
    else AMBER_WGMMA_SS_N128("f16");
  }
}

// As mma_ss with A from registers: this warp's 16 rows x 16 k as an mma.sync A fragment.
template <class T, int N, int kTransB>
__device__ __forceinline__ void mma_rs(float (&c)[N / 8][4], const uint32_t (&a)[4], uint64_t b, bool accumulate) {
  static_assert(N == 64 || N == 128, "m64n64 or m64n128");
  if constexpr (N == 64) {
    if constexpr (__is_same(T, __nv_bfloat16)) AMBER_WGMMA_RS_N64("bf16");
    else AMBER_WGMMA_RS_N64("f16");
  } else {
    if constexpr (__is_same(T, __nv_bfloat16)) AMBER_WGMMA_RS_N128("bf16");
    else AMBER_WGMMA_RS_N128("f16");
  }
}

// c (64 x 256) = (accumulate ? c : 0) + A B for 16-bit operands in shared memory: one
// instruction where two m64n128 products would read A twice (kTransA, kTransB as for
// mma_ss).
#define AMBER_WGMMA_SS_N256(TY)                                                        \
  asm volatile(                                                                      \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                 \
      "wgmma.mma_async.sync.aligned.m64n256k16.f32." TY "." TY " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "            \
      "%128, %129, p, 1, 1, %131, %132;\n}\n"                                      \
      : "+f"(c[0][0]), "+f"(c[0][1]), "+f"(c[0][2]), "+f"(c[0][3]), "+f"(c[1][0]), "+f"(c[1][1]), "+f"(c[1][2]), "+f"(c[1][3]), "+f"(c[2][0]), "+f"(c[2][1]), "+f"(c[2][2]), "+f"(c[2][3]), "+f"(c[3][0]), "+f"(c[3][1]), "+f"(c[3][2]), "+f"(c[3][3]), "+f"(c[4][0]), "+f"(c[4][1]), "+f"(c[4][2]), "+f"(c[4][3]), "+f"(c[5][0]), "+f"(c[5][1]), "+f"(c[5][2]), "+f"(c[5][3]), "+f"(c[6][0]), "+f"(c[6][1]), "+f"(c[6][2]), "+f"(c[6][3]), "+f"(c[7][0]), "+f"(c[7][1]), "+f"(c[7][2]), "+f"(c[7][3]), "+f"(c[8][0]), "+f"(c[8][1]), "+f"(c[8][2]), "+f"(c[8][3]), "+f"(c[9][0]), "+f"(c[9][1]), "+f"(c[9][2]), "+f"(c[9][3]), "+f"(c[10][0]), "+f"(c[10][1]), "+f"(c[10][2]), "+f"(c[10][3]), "+f"(c[11][0]), "+f"(c[11][1]), "+f"(c[11][2]), "+f"(c[11][3]), "+f"(c[12][0]), "+f"(c[12][1]), "+f"(c[12][2]), "+f"(c[12][3]), "+f"(c[13][0]), "+f"(c[13][1]), "+f"(c[13][2]), "+f"(c[13][3]), "+f"(c[14][0]), "+f"(c[14][1]), "+f"(c[14][2]), "+f"(c[14][3]), "+f"(c[15][0]), "+f"(c[15][1]), "+f"(c[15][2]), "+f"(c[15][3]), "+f"(c[16][0]), "+f"(c[16][1]), "+f"(c[16][2]), "+f"(c[16][3]), "+f"(c[17][0]), "+f"(c[17][1]), "+f"(c[17][2]), "+f"(c[17][3]), "+f"(c[18][0]), "+f"(c[18][1]), "+f"(c[18][2]), "+f"(c[18][3]), "+f"(c[19][0]), "+f"(c[19][1]), "+f"(c[19][2]), "+f"(c[19][3]), "+f"(c[20][0]), "+f"(c[20][1]), "+f"(c[20][2]), "+f"(c[20][3]), "+f"(c[21][0]), "+f"(c[21][1]), "+f"(c[21][2]), "+f"(c[21][3]), "+f"(c[22][0]), "+f"(c[22][1]), "+f"(c[22][2]), "+f"(c[22][3]), "+f"(c[23][0]), "+f"(c[23][1]), "+f"(c[23][2]), "+f"(c[23][3]), "+f"(c[24][0]), "+f"(c[24][1]), "+f"(c[24][2]), "+f"(c[24][3]), "+f"(c[25][0]), "+f"(c[25][1]), "+f"(c[25][2]), "+f"(c[25][3]), "+f"(c[26][0]), "+f"(c[26][1]), "+f"(c[26][2]), "+f"(c[26][3]), "+f"(c[27][0]), "+f"(c[27][1]), "+f"(c[27][2]), "+f"(c[27][3]), "+f"(c[28][0]), "+f"(c[28][1]), "+f"(c[28][2]), "+f"(c[28][3]), "+f"(c[29][0]), "+f"(c[29][1]), "+f"(c[29][2]), "+f"(c[29][3]), "+f"(c[30][0]), "+f"(c[30][1]), "+f"(c[30][2]), "+f"(c[30][3]), "+f"(c[31][0]), "+f"(c[31][1]), "+f"(c[31][2]), "+f"(c[31][3]) \
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)), "n"(kTransA), "n"(kTransB))

template <class T, int kTransB, int kTransA = 0>
__device__ __forceinline__ void mma_ss_n256(float (&c)[32][4], uint64_t a, uint64_t b, bool accumulate) {
  if constexpr (__is_same(T, __nv_bfloat16)) AMBER_WGMMA_SS_N256("bf16");
  else AMBER_WGMMA_SS_N256("f16");
}

#undef AMBER_WGMMA_SS_N256

// e4m3 operands, 32 k per product; both K-major (8-bit products take no transpose).
#define AMBER_WGMMA_SS_N128_E4M3                                                        \
  asm volatile(                                                                      \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                  \
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "    \
      "%64, %65, p, 1, 1;\n}\n"                                           \
      : "+f"(c[0][0]), "+f"(c[0][1]), "+f"(c[0][2]), "+f"(c[0][3]), "+f"(c[1][0]), "+f"(c[1][1]), "+f"(c[1][2]), "+f"(c[1][3]), \
      "+f"(c[2][0]), "+f"(c[2][1]), "+f"(c[2][2]), "+f"(c[2][3]), "+f"(c[3][0]), "+f"(c[3][1]), "+f"(c[3][2]), "+f"(c[3][3]), \
      "+f"(c[4][0]), "+f"(c[4][1]), "+f"(c[4][2]), "+f"(c[4][3]), "+f"(c[5][0]), "+f"(c[5][1]), "+f"(c[5][2]), "+f"(c[5][3]), \
      "+f"(c[6][0]), "+f"(c[6][1]), "+f"(c[6][2]), "+f"(c[6][3]), "+f"(c[7][0]), "+f"(c[7][1]), "+f"(c[7][2]), "+f"(c[7][3]), \
      "+f"(c[8][0]), "+f"(c[8][1]), "+f"(c[8][2]), "+f"(c[8][3]), "+f"(c[9][0]), "+f"(c[9][1]), "+f"(c[9][2]), "+f"(c[9][3]), \
      "+f"(c[10][0]), "+f"(c[10][1]), "+f"(c[10][2]), "+f"(c[10][3]), "+f"(c[11][0]), "+f"(c[11][1]), "+f"(c[11][2]), "+f"(c[11][3]), \
      "+f"(c[12][0]), "+f"(c[12][1]), "+f"(c[12][2]), "+f"(c[12][3]), "+f"(c[13][0]), "+f"(c[13][1]), "+f"(c[13][2]), "+f"(c[13][3]), \
      "+f"(c[14][0]), "+f"(c[14][1]), "+f"(c[14][2]), "+f"(c[14][3]), "+f"(c[15][0]), "+f"(c[15][1]), "+f"(c[15][2]), "+f"(c[15][3]) \
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)))

// c (64 x 128) = (accumulate ? c : 0) + A B^T with A (64 x 32) and B (128 x 32) e4m3,
// both K-major in shared memory (a 128-byte swizzled row holds 128 k).
__device__ __forceinline__ void mma_ss_e4m3(float (&c)[16][4], uint64_t a, uint64_t b, bool accumulate) {
  AMBER_WGMMA_SS_N128_E4M3;
}

#undef AMBER_WGMMA_SS_N128_E4M3
#undef AMBER_WGMMA_SS_N64
#undef AMBER_WGMMA_RS_N64
#undef AMBER_WGMMA_SS_N128
#undef AMBER_WGMMA_RS_N128

// Descriptors of whole tiles; a k-step moves the start address, which sits in the
// low bits in 16-byte units, so stepping is one addition. A K-major tile (rows hold
// k in 64-element panels): k-step kk is 32 bytes further inside a panel.
// An MN-major tile (rows hold k = the row index; columns m or n in 64-wide panels):
// k-step kk is 16 rows further.
__device__ __forceinline__ uint64_t k_major(const uint8_t* tile) { return sw128_desc(tile, 16, 1024); }
__device__ __forceinline__ uint64_t mn_major(const uint8_t* tile, int panel_bytes) {
  return sw128_desc(tile, panel_bytes, 1024);
}
template <int kPanelBytes>
__device__ __forceinline__ uint64_t k_step(uint64_t tile, int kk) {
  return tile + (((kk / 4) * kPanelBytes + (kk % 4) * 32) >> 4);
}
__device__ __forceinline__ uint64_t mn_step(uint64_t tile, int kk) { return tile + ((kk * 16 * 128) >> 4); }

// Gives this warpgroup's registers back (producers) or takes more (consumers); the
// kernel must have a register cap at entry (__launch_bounds__(threads, 1)).
template <int registers>
__device__ __forceinline__ void release_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(registers));
}
template <int registers>
__device__ __forceinline__ void claim_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(registers));
}

// mbarriers in shared memory.
__device__ __forceinline__ void barrier_init(uint64_t* bar, int arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_address(bar)), "r"(arrivals));
}
// Makes initialised barriers visible to the copy engine before any copy names them.
__device__ __forceinline__ void barrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void barrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_address(bar)) : "memory");
}
// 4 bytes global -> shared by cp.async; the thread does not wait for them.
__device__ __forceinline__ void cp_async_4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_address(dst)), "l"(src) : "memory");
}
// This thread's arrival on bar, made when its cp.async copies issued so far have
// landed (counted among the barrier's expected arrivals).
__device__ __forceinline__ void barrier_arrive_after_copies(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_address(bar)) : "memory");
}
// One arrival that also announces `bytes` still to land through copies.
__device__ __forceinline__ void barrier_expect(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_address(bar)), "r"(bytes)
               : "memory");
}
// Waits for the phase of the given parity to complete.
__device__ __forceinline__ void barrier_wait(uint64_t* bar, int parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "wait:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait;\n}\n" ::"r"(smem_address(bar)),
      "r"(parity)
      : "memory");
}

// A box of a 2-D tensor map (innermost coordinate x, then row y) into shared memory,
// completing on bar. Rows past the tensor's end arrive as zeros.
__device__ __forceinline__ void tma_load(void* dst, const CUtensorMap& map, int x, int y, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          smem_address(dst)),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(x), "r"(y), "r"(smem_address(bar))
      : "memory");
}

// A box of shared memory into a 2-D (or 3-D) tensor map at (x, y[, z]), as a bulk group
// (bulk_commit, bulk_wait_read); parts of the box past the tensor's ends are not written.
__device__ __forceinline__ void tma_store(const CUtensorMap& map, const void* src, int x, int y) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(
                   reinterpret_cast<uint64_t>(&map)),
               "r"(x), "r"(y), "r"(smem_address(src))
               : "memory");
}
__device__ __forceinline__ void tma_store(const CUtensorMap& map, const void* src, int x, int y, int z) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%1, %2, %3}], [%4];\n" ::"l"(
                   reinterpret_cast<uint64_t>(&map)),
               "r"(x), "r"(y), "r"(z), "r"(smem_address(src))
               : "memory");
}

// Four 8x8 16-bit matrices from registers to shared memory (sm_90): lanes 8m .. 8m+7
// give the row addresses of matrix m, and register m holds this lane's pair of it (row
// lane / 4, cols 2 (lane % 4), +1: an accumulator fragment's layout).
__device__ __forceinline__ void stmatrix_x4(void* row, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_address(row)), "r"(r0),
               "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

// Shared-memory writes by this thread become visible to the async proxy (wgmma
// operands, bulk copies) once the readers synchronise after this fence.
__device__ __forceinline__ void fence_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Bulk copies of `bytes` (a multiple of 16) from shared memory to global memory: a plain
// store, or an element-wise fp32 addition into the destination. The waits cover the
// groups committed so far: `_read` until their sources may be overwritten, the other
// until their writes are done.
__device__ __forceinline__ void bulk_store(void* dst, const void* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst), "r"(smem_address(src)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_add_f32(float* dst, const void* src, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst),
               "r"(smem_address(src)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

// A counter other blocks wait on: the writer's global writes (bulk copies included)
// happen before a reader that acquires the incremented value.
__device__ __forceinline__ void flag_release_add(int* flag) {
  asm volatile("fence.proxy.async.global;\nred.release.gpu.global.add.s32 [%0], 1;\n" ::"l"(flag) : "memory");
}
__device__ __forceinline__ void flag_wait_at_least(const int* flag, int value) {
  int seen;
  do asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(seen) : "l"(flag) : "memory");
  while (seen < value);
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

// Named barriers (ids 1-15) over `threads` threads: sync waits, arrive does not.
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace amber::cuda::hopper
