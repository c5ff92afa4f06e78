#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "amber/ops/cpu/vector_math.h"

namespace amber::cpu {
namespace {

// |got - exact| in units of the last place of the float nearest to exact (for results
// below the normal range, of the smallest subnormal).
double ulps(float got, double exact) {
  const double smallest = std::numeric_limits<float>::denorm_min();
  const float nearest = static_cast<float>(exact);
  const double ulp = std::max(smallest, static_cast<double>(std::nextafter(std::fabs(nearest), INFINITY)) -
                                            std::fabs(static_cast<double>(nearest)));
  return std::fabs(static_cast<double>(got) - exact) / ulp;
}

TEST(VectorMath, ExpIsWithinOneAndAHalfUlpOverTheFloatRange) {
  // Every 61st bit pattern: all binades, both signs, subnormal results included.
  double worst = 0;
  float worst_at = 0;
  int64_t checked = 0;
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 61) {
    const float x = std::bit_cast<float>(static_cast<uint32_t>(bits));
    if (!(x >= -103.9f && x <= 88.72f)) continue;
    const double e = ulps(exp_lanes(x), std::exp(static_cast<double>(x)));
    if (e > worst) worst = e, worst_at = x;
    ++checked;
  }
  EXPECT_GT(checked, 30'000'000);
  EXPECT_LE(worst, 1.5) << "at x = " << worst_at;
}

TEST(VectorMath, ExpEdges) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(exp_lanes(0.0f), 1.0f);
  EXPECT_EQ(exp_lanes(-0.0f), 1.0f);
  EXPECT_EQ(exp_lanes(-inf), 0.0f);
  EXPECT_EQ(exp_lanes(-200.0f), 0.0f);
  EXPECT_EQ(exp_lanes(inf), inf);
  EXPECT_EQ(exp_lanes(88.73f), inf);
  EXPECT_TRUE(std::isfinite(exp_lanes(88.72f)));
  EXPECT_TRUE(std::isnan(exp_lanes(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_GT(exp_lanes(-100.0f), 0.0f);  // a subnormal, not flushed
  EXPECT_EQ(exp_lanes(1.0), std::exp(1.0));  // double is the C library's
}

// A loop the compiler vectorises (at every width the machine offers) gives the bits
// of the call made one element at a time.
AMBER_VECTOR_CLONES void exp_loop(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = exp_lanes(x[i]);
}

TEST(VectorMath, ExpInVectorLanesEqualsExpAlone) {
  std::vector<float> x(4099), y(x.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = -110.0f + 200.0f * static_cast<float>(i) / static_cast<float>(x.size());
  exp_loop(x.data(), y.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    volatile float xi = x[i];  // one element at a time, out of any vector loop
    EXPECT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(exp_lanes(static_cast<float>(xi)))) << x[i];
  }
}

TEST(VectorMath, FixedOrderSumIsThePairwiseSumOfSixteenLanes) {
  std::vector<float> x(37);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 1.0f / static_cast<float>(i + 1) * (i % 3 ? 1.0f : -1e3f);
  float lane[16] = {};
  for (size_t i = 0; i < x.size(); ++i) lane[i % 16] += x[i];
  for (int width = 8; width > 0; width /= 2)
    for (int l = 0; l < width; ++l) lane[l] += lane[l + width];
  EXPECT_EQ(std::bit_cast<uint32_t>(fixed_order_sum(x.data(), static_cast<int64_t>(x.size()))),
            std::bit_cast<uint32_t>(lane[0]));
  EXPECT_EQ(fixed_order_sum(x.data(), 0), 0.0f);
}

}  // namespace
}  // namespace amber::cpu
