// What the CUDA RoPE kernels share: the frequency table passed by value, and the cos/sin
// rows of a block's tokens formed in double from integer positions (exactly as the CPU
// forms them) and rounded to float in shared memory.
#pragma once

#include <cstdio>

#include "amber/ops/cuda/common/common.cuh"
#include "amber/ops/rope.h"

namespace amber::cuda {

constexpr int kMaxRopeHalf = 256;  // rotary_dim up to 512

// Passed by value (about 2 KB of kernel parameters): no device copy of the table,
// so the ops neither allocate nor synchronise.
struct RopeParams {
  double inv_freq[kMaxRopeHalf];
  double cos_scale;  // attention_scale
  double sin_scale;  // attention_scale, negated for the backward (the transpose rotation)
  int half, rotary_dim, dim;
};

// sign +1: the rotation; -1: its transpose.
inline RopeParams rope_params(const RopeTable& table, double sign, const char* op) {
  const int half = table.rotary_dim / 2;
  AMBER_CHECK(half <= kMaxRopeHalf && static_cast<int>(table.inv_freq.size()) == half, op,
              ": rotary dimension ", table.rotary_dim, " exceeds the GPU kernel's limit of ", 2 * kMaxRopeHalf);
  RopeParams p{};
  for (int i = 0; i < half; ++i) p.inv_freq[i] = table.inv_freq[i];
  p.cos_scale = table.attention_scale;
  p.sin_scale = sign * table.attention_scale;
  p.half = half;
  p.rotary_dim = table.rotary_dim;
  p.dim = table.head_dim;
  return p;
}

// The tokens block blockIdx.x of a kTokens-per-block launch takes.
struct BlockTokens {
  int64_t first;
  int count;  // kTokens, fewer in the last block
};

// cos and sin of the angle of frequency i at position pos (of `token`), formed in double
// and rounded to float. A negative position traps with a message naming the token.
__device__ __forceinline__ float2 rope_angle(const RopeParams& p, int32_t pos, int i, int64_t token) {
  if (pos < 0) {
    if (i == 0) printf("amber rope: negative position %d at token %lld\n", pos, static_cast<long long>(token));
    __trap();
  }
  double s, c;
  sincos(pos * p.inv_freq[i], &s, &c);
  return {static_cast<float>(c * p.cos_scale), static_cast<float>(s * p.sin_scale)};
}

// The block's tokens, with cos_row[u][i] and sin_row[u][i] formed for each of them (all
// threads of the block take part; the rows may be read as soon as it returns).
template <int kTokens>
__device__ BlockTokens rope_rows(const RopeParams& p, const int32_t* positions, int64_t tokens,
                                 float (&cos_row)[kTokens][kMaxRopeHalf], float (&sin_row)[kTokens][kMaxRopeHalf]) {
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kTokens;
  const int count = static_cast<int>(tokens - first < kTokens ? tokens - first : kTokens);
  for (int j = threadIdx.x; j < count * p.half; j += blockDim.x) {
    const int u = j / p.half, i = j % p.half;
    const float2 a = rope_angle(p, positions[first + u], i, first + u);
    cos_row[u][i] = a.x;
    sin_row[u][i] = a.y;
  }
  __syncthreads();
  return {first, count};
}

}  // namespace amber::cuda
