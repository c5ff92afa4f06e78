// The checks every backend makes before a collective: shapes and counts that agree, so
// that a wrong call is an error naming the collective rather than memory overrun on
// some rank.
#pragma once

#include <cstdint>
#include <span>

#include "amber/core/tensor.h"

namespace amber::dist {

// counts has world_size entries, none negative; their sum is input's elements and
// counts[rank] output's (for a reduce-scatter; swapped for an all-gather).
void check_blocks(const char* collective, const Tensor& whole, const Tensor& block, std::span<const int64_t> counts,
                  int rank, int world_size);
// A tensor a collective reads or writes: defined and contiguous.
void check_operand(const char* collective, const Tensor& t);

}  // namespace amber::dist
