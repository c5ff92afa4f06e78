// The f32 gradient sums the Hopper attention backward leaves behind ([heads, T, D], one
// D-float row per head and token), and how their columns sit in a row. The attention
// turns them into its bf16 dQ/dK/dV; the fused QK-norm + RoPE backward can read q's
// straight from them, so dQ never goes through memory in bf16.
#pragma once

#include <cstdint>

namespace amber::cuda {

// Row (h, t) of a sum starts at sum + (h * tokens + t) * D; the gradient is scale times
// it.
struct OrderedSum {
  const float* sum;
  float scale;
};

// Where column `col` of token `row` sits in a row of an ordered sum (64 or 128 floats):
// the row's 16-byte chunks are permuted by the token (XOR with 2 (row % 4)), so the
// attention's fragment stores of eight consecutive rows into an fp32 tile spread over
// the banks (rows 256 or 512 bytes apart otherwise share them: 8-way conflicts). Rows
// stay whole, so bulk copies of any number of rows are unchanged; a 16-byte chunk's
// four columns stay together, in order.
__device__ __forceinline__ int sum_column(int64_t row, int col) {
  return ((col / 4) ^ (2 * static_cast<int>(row % 4))) * 4 + col % 4;
}

}  // namespace amber::cuda
