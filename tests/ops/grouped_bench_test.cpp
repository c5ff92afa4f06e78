// The grouped GEMM benchmark's routing, which both arms of the PyTorch comparison run
// on: top-k distinct experts per token, counts and offsets that agree, one routing per
// seed, and a skewed routing that is skewed; then the bench on the CPU and the file
// the PyTorch arm reads.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numeric>
#include <set>

#include <nlohmann/json.hpp>

#include "amber/core/error.h"
#include "amber/core/device.h"
#include "bench/grouped_bench.h"

namespace amber {
namespace {

double max_over_mean(const GroupedRouting& r) {
  const double mean = static_cast<double>(r.offsets.back()) / static_cast<double>(r.counts.size());
  return *std::max_element(r.counts.begin(), r.counts.end()) / mean;
}

TEST(GroupedBench, EveryTokenPicksTopkDistinctExperts) {
  for (const std::string routing : {"uniform", "skewed"}) {
    const GroupedRouting r = route_tokens(1000, 64, 8, routing, 3);
    ASSERT_EQ(r.choices.size(), 8000u) << routing;
    for (size_t t = 0; t < 1000; ++t) {
      const std::set<int32_t> picked(r.choices.begin() + t * 8, r.choices.begin() + t * 8 + 8);
      EXPECT_EQ(picked.size(), 8u) << routing << " token " << t;
      EXPECT_GE(*picked.begin(), 0);
      EXPECT_LT(*picked.rbegin(), 64);
    }
  }
}

TEST(GroupedBench, CountsSumToTokensTimesTopkAndOffsetsArePrefixSums) {
  for (const std::string routing : {"uniform", "skewed"}) {
    const GroupedRouting r = route_tokens(777, 128, 4, routing, 5);
    ASSERT_EQ(r.counts.size(), 128u);
    ASSERT_EQ(r.offsets.size(), 129u);
    EXPECT_EQ(std::accumulate(r.counts.begin(), r.counts.end(), 0), 777 * 4) << routing;
    std::vector<int32_t> counted(128, 0);
    for (int32_t e : r.choices) ++counted[static_cast<size_t>(e)];
    EXPECT_EQ(counted, r.counts) << routing;
    EXPECT_EQ(r.offsets[0], 0);
    for (size_t e = 0; e < 128; ++e) EXPECT_EQ(r.offsets[e + 1] - r.offsets[e], r.counts[e]) << routing;
  }
}

TEST(GroupedBench, OneSeedGivesOneRouting) {
  for (const std::string routing : {"uniform", "skewed"}) {
    const GroupedRouting a = route_tokens(512, 128, 4, routing, 7), b = route_tokens(512, 128, 4, routing, 7);
    EXPECT_EQ(a.choices, b.choices) << routing;
    EXPECT_EQ(a.offsets, b.offsets) << routing;
    EXPECT_NE(a.choices, route_tokens(512, 128, 4, routing, 8).choices) << routing;
  }
  // The routings differ from each other too (uniform is not skewed's seed in disguise).
  EXPECT_NE(route_tokens(512, 128, 4, "uniform", 7).counts, route_tokens(512, 128, 4, "skewed", 7).counts);
}

// At 16384 tokens a uniform routing's busiest expert is within a few percent of the
// mean (about 1.1x); the skewed one (Zipf exponent 1/2) gives its busiest expert more
// than 3x the mean rows on gpt-oss-120b's E128 top-4 and more than 2.5x on Kohaku's
// E64 top-8 (about 5.7x and 3.6x in a simulation).
TEST(GroupedBench, SkewedRoutingIsSkewedAndUniformIsNot) {
  EXPECT_LT(max_over_mean(route_tokens(16384, 128, 4, "uniform", 1)), 1.25);
  EXPECT_LT(max_over_mean(route_tokens(16384, 64, 8, "uniform", 1)), 1.25);
  EXPECT_GT(max_over_mean(route_tokens(16384, 128, 4, "skewed", 1)), 3.0);
  EXPECT_GT(max_over_mean(route_tokens(16384, 64, 8, "skewed", 1)), 2.5);
}

TEST(GroupedBench, BadArgumentsAreNamed) {
  EXPECT_THROW(route_tokens(16, 8, 9, "uniform", 1), Error);  // top-k above the experts
  try {
    route_tokens(16, 8, 2, "zipf", 1);
    ADD_FAILURE() << "routing zipf was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("uniform, skewed"), std::string::npos) << e.what();
  }
  try {
    grouped_bench_shapes("mm2");
    ADD_FAILURE() << "shape mm2 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mm1, kohaku768"), std::string::npos) << e.what();
  }
}

// The CPU run of the tiny shape: every product timed, its first call within bf16
// rounding of float64 (f32 rounding for the f32 weight gradient), the bytes and the
// roofline limits as the header defines them.
TEST(GroupedBench, TinyCaseOnTheCpuTimesEveryProductNearFloat64) {
  GroupedBenchCase c{grouped_bench_shapes("tiny")[0], 64, "skewed", route_tokens(64, 8, 2, "skewed", 1), {}};
  const GroupedRoofs roofs{.copy_tb_per_s = 0.01, .gemm_tflops = 0.1, .gemm_size = 512};
  run_grouped_bench(c, Device::cpu(), roofs, {.repeats = 1, .check_errors = true});
  ASSERT_EQ(c.rows.size(), 7u);
  const double rows = 128, n = 512, k = 256, weights = 2.0 * 8 * n * k;  // every tiny expert has rows
  const double fp8_scales = 4.0 * (rows * 2 + 8 * 4 * 2);  // [rows, K/128] and [E, N/128, K/128] f32
  const double mxfp4_weights = 8 * n * (k / 2 + k / 32);   // e2m1 pairs and an e8m0 scale per 32
  const double flops = 2 * rows * n * k;
  const std::vector<std::pair<std::string, double>> expected = {
      {"forward", 2 * rows * k + weights + 2 * rows * n},
      {"swiglu forward", 2 * rows * k + weights + 3 * rows * n},
      {"backward input", 2 * rows * n + weights + 2 * rows * k},
      {"backward weight", 2 * rows * n + 2 * rows * k + 4.0 * 8 * n * k},
      {"forward fp8", rows * k + weights / 2 + 2 * rows * n + fp8_scales},
      {"forward mxfp4", 2 * rows * k + mxfp4_weights + 2 * rows * n},
      {"swiglu forward mxfp4", 2 * rows * k + mxfp4_weights + 3 * rows * n}};
  ASSERT_TRUE(std::all_of(c.route.counts.begin(), c.route.counts.end(), [](int32_t r) { return r > 0; }));
  for (size_t i = 0; i < expected.size(); ++i) {
    const GroupedBenchRow& r = c.rows[i];
    EXPECT_EQ(r.product, expected[i].first);
    EXPECT_DOUBLE_EQ(r.bytes, expected[i].second) << r.product;
    EXPECT_DOUBLE_EQ(r.flops, flops) << r.product;
    EXPECT_GT(r.ms, 0) << r.product;
    EXPECT_NEAR(r.memory_ms, r.bytes / 1e10 * 1e3, 1e-9 * r.memory_ms) << r.product;
    EXPECT_NEAR(r.compute_ms, flops / 1e11 * 1e3, 1e-9 * r.compute_ms) << r.product;
    EXPECT_DOUBLE_EQ(r.of_bound, std::max(r.memory_ms, r.compute_ms) / r.ms) << r.product;
    // FP8's error includes e4m3's rounding of both operands, MXFP4's e2m1's of the weights.
    const bool mxfp4 = r.product.find("mxfp4") != std::string::npos;
    EXPECT_LT(r.error, r.product == "backward weight" ? 1e-6 : mxfp4 ? 0.2 : r.product == "forward fp8" ? 5e-2 : 8e-3)
        << r.product;
    if (mxfp4) std::cout << r.product << ": error " << r.error << "\n";
    EXPECT_GE(r.error, 0) << r.product;
  }
}

// A down projection (no gate/up pair) times every product but the SwiGLU forwards, and
// its input gradient also with the MoE SwiGLU's backward in its epilogue (within bf16
// rounding of the float64 product and pass); the Kohaku shapes list both projections
// of each width.
TEST(GroupedBench, DownProjectionSkipsTheSwigluForwards) {
  const std::vector<GroupedBenchShape> kohaku = grouped_bench_shapes("kohaku");
  ASSERT_EQ(kohaku.size(), 4u);
  EXPECT_EQ(kohaku[2].name, "kohaku768-down");
  EXPECT_FALSE(kohaku[2].gate_up);
  EXPECT_EQ(kohaku[2].k, 384);
  EXPECT_EQ(kohaku[2].n, 768);
  EXPECT_EQ(grouped_bench_shapes("kohaku896-down")[0].k, 512);
  EXPECT_EQ(grouped_bench_shapes("all").size(), 5u);
  GroupedBenchShape down{"down", "CPU: E8 top-2, 128 -> 192", 8, 2, 128, 192, {32}, false};
  GroupedBenchCase c{down, 32, "uniform", route_tokens(32, 8, 2, "uniform", 1), {}};
  const GroupedRoofs roofs{.copy_tb_per_s = 0.01, .gemm_tflops = 0.1, .gemm_size = 512};
  run_grouped_bench(c, Device::cpu(), roofs, {.repeats = 1, .check_errors = true});
  std::vector<std::string> names;
  for (const GroupedBenchRow& r : c.rows) {
    names.push_back(r.product);
    EXPECT_GE(r.error, 0) << r.product;
    if (r.product == "backward input + swiglu backward") {
      EXPECT_LT(r.error, 8e-3);
    }
  }
  EXPECT_EQ(names, (std::vector<std::string>{"forward", "backward input", "backward input + swiglu backward",
                                             "backward weight", "forward fp8", "forward mxfp4"}));
}

// --variants: each m-grouped product once per variant, named after it (the CPU ignores
// the variants, so this checks the bookkeeping), the weight gradient once per tile width.
TEST(GroupedBench, EveryVariantTimesTheMGroupedProducts) {
  EXPECT_EQ(grouped_variant("default").tile_n, 0);
  EXPECT_TRUE(grouped_variant("default").store_partition);
  EXPECT_FALSE(grouped_variant("math-stores").store_partition);
  EXPECT_EQ(grouped_variant("tile128").tile_n, 128);
  EXPECT_EQ(grouped_variant("tile256").tile_n, 256);
  EXPECT_FALSE(grouped_variant("loader-scales").split_scales);
  EXPECT_THROW(grouped_variant("tile64"), Error);
  GroupedBenchCase c{grouped_bench_shapes("tiny")[0], 16, "uniform", route_tokens(16, 8, 2, "uniform", 1), {}};
  const GroupedRoofs roofs{.copy_tb_per_s = 0.01, .gemm_tflops = 0.1, .gemm_size = 512};
  run_grouped_bench(c, Device::cpu(), roofs,
                    {.repeats = 1, .check_errors = false, .variants = {"default", "tile256", "loader-scales"}});
  std::vector<std::string> names;
  for (const GroupedBenchRow& r : c.rows) names.push_back(r.product);
  EXPECT_EQ(names, (std::vector<std::string>{"forward", "forward, tile256", "swiglu forward", "swiglu forward, tile256",
                                             "backward input", "backward input, tile256", "backward weight",
                                             "backward weight, tile256", "forward fp8", "forward fp8, tile256",
                                             "forward fp8, loader-scales", "forward mxfp4", "swiglu forward mxfp4"}));
}

// The file bench/compare/grouped_torch.py runs PyTorch on: each case's routing and
// amber's times.
TEST(GroupedBench, CasesFileHoldsTheRoutingAndTheTimes) {
  GroupedBenchCase c{grouped_bench_shapes("tiny")[0], 40, "uniform", route_tokens(40, 8, 2, "uniform", 2), {}};
  c.rows.push_back({.product = "forward", .ms = 0.5, .tflops = 3.0});
  const GroupedRoofs roofs{.copy_tb_per_s = 3.5, .gemm_tflops = 700, .gemm_size = 8192};
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "amber_grouped_cases_test";
  std::filesystem::remove_all(dir);
  save_grouped_cases((dir / "grouped_cases.json").string(), {c}, roofs, "cuda:0");
  const auto saved = nlohmann::json::parse(std::ifstream(dir / "grouped_cases.json"));
  EXPECT_EQ(saved["device"], "cuda:0");
  EXPECT_DOUBLE_EQ(saved["gemm_tflops"].get<double>(), 700);
  ASSERT_EQ(saved["cases"].size(), 1u);
  const auto& one = saved["cases"][0];
  EXPECT_EQ(one["shape"], "tiny");
  EXPECT_EQ(one["experts"], 8);
  EXPECT_EQ(one["topk"], 2);
  EXPECT_EQ(one["k"], 256);
  EXPECT_EQ(one["n"], 512);
  EXPECT_EQ(one["tokens"], 40);
  EXPECT_EQ(one["routing"], "uniform");
  EXPECT_EQ(one["counts"].get<std::vector<int32_t>>(), c.route.counts);
  EXPECT_EQ(one["offsets"].get<std::vector<int32_t>>(), c.route.offsets);
  EXPECT_DOUBLE_EQ(one["amber"]["forward"]["ms"].get<double>(), 0.5);
  EXPECT_FALSE(std::filesystem::exists(dir / "grouped_cases.json.partial"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace amber
