// The grouped GEMM benchmark's routing, which both arms of the PyTorch comparison run
// on: top-k distinct experts per token, counts and offsets that agree, one routing per
// seed, and a skewed routing that is skewed; then the bench on the CPU and its file.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include <nlohmann/json.hpp>

#include "amber/core/error.h"
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

}  // namespace
}  // namespace amber
