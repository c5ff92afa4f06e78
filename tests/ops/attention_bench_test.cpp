// The attention benchmark's bookkeeping, which both arms of the PyTorch comparison
// rely on: the short-document lengths and the causal FLOP count.
#include <gtest/gtest.h>

#include <numeric>
#include <string>

#include "amber/core/error.h"
#include "amber/ops/attention_bench.h"

namespace amber {
namespace {

TEST(AttentionBench, SpreadLengthsFillTheTokensWithinTheRange) {
  const std::vector<int32_t> lengths = spread_lengths(16384, 50, 600);
  EXPECT_EQ(std::accumulate(lengths.begin(), lengths.end(), int64_t{0}), 16384);
  for (size_t i = 0; i + 1 < lengths.size(); ++i) {
    EXPECT_GE(lengths[i], 50);
    EXPECT_LE(lengths[i], 600);
  }
  EXPECT_GE(lengths.back(), 1);
  // The fixed sequence bench/compare/attention_torch.py reproduces: 50 + (7919 i + 13) % 551.
  EXPECT_EQ(lengths[0], 63);
  EXPECT_EQ(lengths[1], 268);
}

TEST(AttentionBench, FlopsCountVisiblePairsPerDocument) {
  AttentionBenchShape causal{"x", "", 2, 1, 64, 0, {3, 4}};
  // Pairs: 1+2+3 and 1+2+3+4 = 16; 4 FLOPs per pair per head_dim per head.
  EXPECT_DOUBLE_EQ(attention_forward_flops(causal), 4.0 * 16 * 2 * 64);
  AttentionBenchShape windowed = causal;
  windowed.window = 2;  // pairs per row capped at 2: 1+2+2 and 1+2+2+2 = 12
  EXPECT_DOUBLE_EQ(attention_forward_flops(windowed), 4.0 * 12 * 2 * 64);
}

TEST(AttentionBench, UnknownShapeIsNamed) {
  try {
    attention_bench_shapes("F");
    ADD_FAILURE() << "shape F was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("A, B, C, D, E"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace amber
