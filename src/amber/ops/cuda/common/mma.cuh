// Warp-level tensor-core primitives (sm_80 and later): mma.sync m16n8k16 with fp32
// accumulators and ldmatrix fragment loads from shared memory (cp.async, which fills
// the tiles, is in async_copy.cuh). Fragment layouts follow the PTX ISA: with
// g = lane / 4 and t = lane % 4, an accumulator holds (row g, cols 2t, 2t+1) in c[0..1]
// and (row g + 8, same cols) in c[2..3].
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "amber/ops/cuda/common/async_copy.cuh"

namespace amber::cuda {

// Four 8x8 16-bit matrices; lanes 8m .. 8m+7 give the row addresses of matrix m, and
// register m receives this lane's pair of matrix m (row g, cols 2t, 2t+1).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(row)));
}

// As ldmatrix_x4 with each matrix transposed: register m receives (rows 2t, 2t+1, col g).
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(row)));
}

// c += a (16x16, row-major fragment) * b (16x8, column-major fragment), fp32 accumulate.
template <class T>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1) {
  if constexpr (sizeof(T) == 2 && __is_same(T, __nv_bfloat16)) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    static_assert(__is_same(T, __half), "mma_16816 takes bf16 or f16 operands");
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two floats rounded to T and packed low-first, the layout of an operand register.
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (__is_same(T, __nv_bfloat16)) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// The two values of T in an operand register, widened to fp32 (pack2's inverse).
template <class T>
__device__ __forceinline__ void unpack2(uint32_t packed, float (&out)[2]) {
  if constexpr (__is_same(T, __nv_bfloat16)) {
    out[0] = __uint_as_float(packed << 16);
    out[1] = __uint_as_float(packed & 0xFFFF0000u);
  } else {
    const float2 v = __half22float2(*reinterpret_cast<const __half2*>(&packed));
    out[0] = v.x;
    out[1] = v.y;
  }
}

// The A operand (16 rows x 16 k) made from two accumulator tiles (cols k 0-7 and 8-15)
// of the same rows: an accumulator's (row, col pair) is exactly an A register's.
template <class T>
__device__ __forceinline__ void accumulators_to_a(const float (&lo)[4], const float (&hi)[4],
                                                  uint32_t (&a)[4]) {
  a[0] = pack2<T>(lo[0], lo[1]);
  a[1] = pack2<T>(lo[2], lo[3]);
  a[2] = pack2<T>(hi[0], hi[1]);
  a[3] = pack2<T>(hi[2], hi[3]);
}

}  // namespace amber::cuda
