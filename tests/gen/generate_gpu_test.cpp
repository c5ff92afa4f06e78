// Generation on the GPU against the CPU: the cache append and the cached attention
// against the CPU ops on fresh Philox inputs, and whole generations (dense and MoE)
// against the CPU's, with the decode step replayed as a CUDA graph and launched anew.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "amber/gen/generate.h"
#include "amber/ops/attention.h"
#include "ops/testing.h"
#include "tiny_model.h"

namespace amber {
namespace {

#define REQUIRE_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device"

struct CacheCase {
  const char* name;
  int64_t heads, kv_heads, dim;
  int window;
  bool sinks;
  std::vector<int32_t> counts, starts;
};

Tensor ints(const std::vector<int32_t>& v) { return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}); }

TEST(GenerationGpu, CacheAppendAndCachedAttentionMatchTheCpu) {
  REQUIRE_GPU();
  const Device gpu = Device::cuda(0);
  const int64_t capacity = 40;
  const std::vector<CacheCase> cases = {
      {"decode", 4, 2, 64, 0, false, {1, 1, 1}, {0, 7, 30}},
      {"prefill_sinks", 8, 8, 128, 0, true, {5, 1, 12}, {0, 3, 10}},
      {"window_gqa", 6, 2, 32, 4, true, {3, 2}, {9, 0}},
      {"wide_heads", 2, 1, 256, 0, false, {2}, {37}},
  };
  uint64_t seed = 100;
  for (const DType dt : {DType::f32, DType::bf16})
    for (const CacheCase& c : cases) {
      SCOPED_TRACE(std::string(c.name) + " " + std::string(dtype_name(dt)));
      const int64_t sequences = static_cast<int64_t>(c.counts.size());
      std::vector<int32_t> cu = {0};
      for (int32_t n : c.counts) cu.push_back(cu.back() + n);
      const int64_t tokens = cu.back();
      const Tensor q = testing::random_tensor({tokens, c.heads, c.dim}, dt, ++seed);
      // New keys and values as a slice of a stacked projection, as the layer hands them.
      const Tensor stacked = testing::random_tensor({tokens, 3 * c.kv_heads, c.dim}, dt, ++seed);
      const Tensor k = stacked.slice(1, 0, c.kv_heads), v = stacked.slice(1, 2 * c.kv_heads, 3 * c.kv_heads);
      const Tensor sinks = c.sinks ? testing::random_tensor({c.heads}, DType::f32, ++seed) : Tensor();
      Tensor k_cache = testing::random_tensor({sequences, capacity, c.kv_heads, c.dim}, dt, ++seed);
      Tensor v_cache = testing::random_tensor({sequences, capacity, c.kv_heads, c.dim}, dt, ++seed);
      AttentionOptions options;
      options.window = c.window;

      Tensor gk = k_cache.to(gpu), gv = v_cache.to(gpu);
      const Tensor g_stacked = stacked.to(gpu);
      const Tensor gcu = ints(cu).to(gpu), gstarts = ints(c.starts).to(gpu);
      kv_cache_append(g_stacked.slice(1, 0, c.kv_heads), g_stacked.slice(1, 2 * c.kv_heads, 3 * c.kv_heads), gcu,
                      gstarts, gk, gv);
      kv_cache_append(k, v, ints(cu), ints(c.starts), k_cache, v_cache);
      EXPECT_EQ(gk.to_doubles(), k_cache.to_doubles()) << "the caches' bits after the append";
      EXPECT_EQ(gv.to_doubles(), v_cache.to_doubles());

      Tensor out = Tensor::empty(q.shape(), dt);
      attention_cached_forward(q, k_cache, v_cache, ints(cu), ints(c.starts), options, sinks, out);
      Tensor g_out = Tensor::full(q.shape(), NAN, dt).to(gpu);  // every element must be written
      attention_cached_forward(q.to(gpu), gk, gv, gcu, gstarts, options, c.sinks ? sinks.to(gpu) : Tensor(), g_out);
      // Both compute in f32 and round once: bf16 outputs differ by at most about an ulp.
      EXPECT_LT(testing::relative_error(g_out.to(Device::cpu()), out), dt == DType::f32 ? 2e-6 : 8e-3);
    }
}

// Head dimension 32 (the CUDA kernels' smallest), attention sinks and a window shorter
// than the generations.
ModelConfig dense_model() {
  ModelConfig c = testing::tiny_model();
  c.dim = 128;
  c.mlp_hidden = 128;
  c.attn_sink = true;
  c.sliding_window = 9;
  return c;
}

// In f32 on both devices greedy choices agree, whether the GPU replays the decode step
// as a graph or launches it anew.
TEST(GenerationGpu, GreedyGenerationEqualsTheCpu) {
  REQUIRE_GPU();
  const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3, 4, 5}, {6}, {7, 8, 9}};
  LanguageModel cpu(dense_model());
  cpu.init_weights(11);
  LanguageModel gpu(dense_model(), DType::f32, Device::cuda(0));
  gpu.init_weights(11);
  GenerationConfig g;
  g.max_new_tokens = 24;
  g.sampling.temperature = 0;
  const Generation want = generate(cpu, prompts, g);
  const Generation graphed = generate(gpu, prompts, g);
  EXPECT_EQ(graphed.tokens, want.tokens);
  EXPECT_GT(graphed.graph_replays, 0);
  g.cuda_graph = false;
  const Generation plain = generate(gpu, prompts, g);
  EXPECT_EQ(plain.tokens, want.tokens);
  EXPECT_EQ(plain.graph_replays, 0);
}

// The graph's replays give the very tokens of plain launches, sampled, for dense and
// MoE models (whose routing changes every step inside the graph), in f32 and bf16 (the
// GPU's grouped products take bf16 only).
TEST(GenerationGpu, GraphReplaysEqualPlainLaunches) {
  REQUIRE_GPU();
  const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3, 4, 5}, {6}, {7, 8, 9}, {10, 11}};
  struct Arm {
    const char* name;
    ModelConfig config;
    DType compute;
  };
  for (const Arm& arm : {Arm{"dense f32", dense_model(), DType::f32}, Arm{"dense bf16", dense_model(), DType::bf16},
                         Arm{"moe bf16", testing::with_small_moe(dense_model()), DType::bf16}}) {
    SCOPED_TRACE(arm.name);
    LanguageModel m(arm.config, DType::f32, Device::cuda(0), arm.compute);
    m.init_weights(11);
    GenerationConfig g;
    g.max_new_tokens = 24;
    g.sampling.seed = 4;
    const Generation graphed = generate(m, prompts, g);
    g.cuda_graph = false;
    EXPECT_EQ(graphed.tokens, generate(m, prompts, g).tokens);
    EXPECT_GT(graphed.graph_replays, 0);
  }
}

}  // namespace
}  // namespace amber
