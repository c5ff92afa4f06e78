#include "amber/dist/collective_checks.h"

#include <numeric>

#include "amber/core/error.h"

namespace amber::dist {

void check_operand(const char* collective, const Tensor& t) {
  AMBER_CHECK(t.defined() && t.is_contiguous(), collective, ": operands must be defined, contiguous tensors");
}

void check_blocks(const char* collective, const Tensor& whole, const Tensor& block, std::span<const int64_t> counts,
                  int rank, int world_size) {
  check_operand(collective, whole);
  check_operand(collective, block);
  AMBER_CHECK(whole.dtype() == block.dtype(), collective, ": dtypes ", dtype_name(whole.dtype()), " and ",
              dtype_name(block.dtype()), " differ");
  AMBER_CHECK(static_cast<int>(counts.size()) == world_size, collective, ": ", counts.size(),
              " block counts for a world of ", world_size, " ranks");
  int64_t total = 0;
  for (int64_t c : counts) {
    AMBER_CHECK(c >= 0, collective, ": negative block count ", c);
    total += c;
  }
  AMBER_CHECK(total == whole.numel() && counts[rank] == block.numel(), collective, ": blocks of ", total,
              " elements in all and ", counts[rank], " on rank ", rank, " do not match tensors of ", whole.numel(),
              " and ", block.numel(), " elements");
}

}  // namespace amber::dist
