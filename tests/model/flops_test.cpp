#include <gtest/gtest.h>

#include "amber/model/flops.h"
#include "tiny_model.h"

namespace amber {
namespace {

ModelConfig small_config() {
  ModelConfig c = testing::tiny_model();
  c.vocab_size = 1000;
  c.dim = 64;
  c.mlp_hidden = 96;
  return c;
}

TEST(Flops, MatchHandComputedValuesForAMixedBatch) {
  const ModelConfig c = small_config();
  const std::vector<int32_t> lengths = {3, 10, 1};  // 14 tokens
  // Per layer: q 64*64 + k,v 2*64*32 + o 64*64 = 12288; mlp 3*64*96 = 18432.
  EXPECT_EQ(block_matmul_params(c), 2 * (12288 + 18432));
  const FlopCount f = count_flops(c, lengths);
  EXPECT_DOUBLE_EQ(f.dense_forward, 2.0 * 61440 * 14);
  EXPECT_DOUBLE_EQ(f.head_forward, 2.0 * 64 * 1000 * 14);
  // Causal pairs: 6 + 55 + 1 = 62 per layer; 4 * q_dim(64) * 62 * 2 layers.
  EXPECT_DOUBLE_EQ(f.attention_forward, 4.0 * 64 * 62 * 2);
  EXPECT_DOUBLE_EQ(f.model, 3.0 * (1720320.0 + 31744.0 + 1792000.0));
  EXPECT_DOUBLE_EQ(f.hardware, f.model);
}

TEST(Flops, WindowAndRecompute) {
  ModelConfig c = small_config();
  c.sliding_window = 4;  // layer 0 windowed; the last layer is always global
  c.recompute = "block";
  EXPECT_DOUBLE_EQ(attention_pairs(10, 4), 10 * 4 - 4 * 3 / 2.0);  // 34
  EXPECT_DOUBLE_EQ(attention_pairs(3, 4), 6);                       // shorter than the window
  const FlopCount f = count_flops(c, {3, 10, 1});
  // Layer 0: 6 + 34 + 1 = 41 pairs; layer 1: 62 pairs.
  EXPECT_DOUBLE_EQ(f.attention_forward, 4.0 * 64 * (41 + 62));
  EXPECT_DOUBLE_EQ(f.hardware, f.model + f.dense_forward + f.attention_forward);
  // The embedding lookup counts nothing: tying it to the head changes nothing.
  c.tie_embeddings = true;
  EXPECT_DOUBLE_EQ(count_flops(c, {3, 10, 1}).model, f.model);
}

}  // namespace
}  // namespace amber
