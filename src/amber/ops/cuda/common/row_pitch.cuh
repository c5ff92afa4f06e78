// Rows of an op's input or input gradient that may be the heads of a stacked
// projection: a token-strided view [T, H, D] (rows contiguous, tokens apart by more than
// H * D) or a contiguous tensor. Shared by the norms and the fused QK-norm + RoPE.
#pragma once

#include <cstdint>

#include "amber/core/tensor.h"

namespace amber::cuda {

// Where row r of an input or input gradient starts: rows of d elements, `heads` rows
// per token and tokens token_stride elements apart; a contiguous tensor is one row per
// "token" (heads 1, token_stride d). A token-strided view [T, H, d] is the heads of a
// stacked projection (QK-norm reading q in place beside k and v). Its token index
// row / heads is a high multiply and a shift (rows < 2^31; magic = ceil(2^(31 + l) /
// heads) < 2^32, l = ceil(log2 heads)): the QK-norms are short rows, where a 64-bit
// division per row cost more than their memory traffic.
struct RowPitch {
  int64_t heads, token_stride;
  int64_t gap;  // token_stride - heads * d: what a token's rows skip
  uint32_t magic;
  int shift;  // l - 1
  __device__ __forceinline__ int64_t at(int64_t row, int64_t d) const {
    if (heads == 1) return row * token_stride;
    const uint32_t token = __umulhi(static_cast<uint32_t>(row), magic) >> shift;
    return row * d + static_cast<int64_t>(token) * gap;
  }
};

// t's rows, checked: a contiguous tensor or a token-strided view (`what` names it in errors).
inline RowPitch row_pitch(const Tensor& t, const char* what, const char* op) {
  const int64_t d = t.size(-1);
  if (t.is_contiguous()) return {1, d, 0, 0, 0};
  AMBER_CHECK(t.ndim() == 3 && t.stride(2) == 1 && t.stride(1) == d && t.stride(0) >= t.size(1) * d, op, ": ", what,
              " ", t.shape(), " must be contiguous or a token-strided [T, H, D] view (the heads of a stacked projection)");
  const int64_t heads = t.size(1), rows = t.size(0) * heads;
  if (heads == 1) return {1, t.stride(0), 0, 0, 0};
  AMBER_CHECK(rows < (int64_t{1} << 31), op, ": ", what, " ", t.shape(), " has ", rows,
              " rows; token-strided views take fewer than 2^31 (make it contiguous first)");
  int l = 0;
  while ((int64_t{1} << l) < heads) ++l;
  const uint64_t magic = ((uint64_t{1} << (31 + l)) + static_cast<uint64_t>(heads) - 1) / static_cast<uint64_t>(heads);
  return {heads, t.stride(0), t.stride(0) - heads * d, static_cast<uint32_t>(magic), l - 1};
}

}  // namespace amber::cuda
