// The attention benchmark's bookkeeping, which both arms of the PyTorch comparison
// rely on: the short-document lengths and the causal FLOP count.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <string>

#include <nlohmann/json.hpp>

#include "amber/core/error.h"
#include "bench/attention_bench.h"
#include "testing.h"

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

// The files attention_torch.py --inputs-dir reads: the geometry as JSON and each tensor's
// bf16 bits, raw.
TEST(AttentionBench, SavedInputsHoldTheGeometryAndTheBits) {
  const AttentionBenchShape shape{"T", "", 2, 1, 8, 3, {3, 2}};
  const Tensor q = testing::random_tensor({5, 2, 8}, DType::bf16, 1), k = testing::random_tensor({5, 1, 8}, DType::bf16, 2);
  const Tensor v = testing::random_tensor({5, 1, 8}, DType::bf16, 3), dout = testing::random_tensor({5, 2, 8}, DType::bf16, 4);
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "amber_attention_inputs_test";
  std::filesystem::remove_all(dir);
  save_attention_inputs(dir.string(), shape, q, k, v, dout);
  const auto geometry = nlohmann::json::parse(std::ifstream(dir / "T.json"));
  EXPECT_EQ(geometry["lengths"].get<std::vector<int32_t>>(), shape.lengths);
  EXPECT_EQ(geometry["heads"], 2);
  EXPECT_EQ(geometry["kv_heads"], 1);
  EXPECT_EQ(geometry["head_dim"], 8);
  EXPECT_EQ(geometry["window"], 3);
  for (const auto& [name, t] : {std::pair{"q", &q}, {"k", &k}, {"v", &v}, {"dout", &dout}}) {
    std::ifstream in(dir / (std::string("T.") + name + ".bf16"), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_EQ(bytes.size(), t->bytes()) << name;
    EXPECT_EQ(bytes, std::string(static_cast<const char*>(t->raw()), t->bytes())) << name;
  }
  EXPECT_THROW(save_attention_inputs(dir.string(), shape, q.to(DType::f32), k, v, dout), Error);
  std::filesystem::remove_all(dir);
}

TEST(AttentionBench, UnknownShapeIsNamed) {
  try {
    attention_bench_shapes("G");
    ADD_FAILURE() << "shape G was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("A, B, C, D, E, F"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace amber
