#include <gtest/gtest.h>

#include <cmath>

#include "amber/core/philox.h"
#include "amber/core/random.h"

namespace amber {
namespace {

// Known-answer vectors published with Random123 (kat_vectors, philox4x32_10).
TEST(Philox, MatchesPublishedKnownAnswers) {
  const philox::Block zero = philox::philox4x32_10({{0, 0, 0, 0}}, 0, 0);
  EXPECT_EQ(zero.v[0], 0x6627e8d5u);
  EXPECT_EQ(zero.v[1], 0xe169c58du);
  EXPECT_EQ(zero.v[2], 0xbc57ac4cu);
  EXPECT_EQ(zero.v[3], 0x9b00dbd8u);
  const philox::Block ones =
      philox::philox4x32_10({{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu);
  EXPECT_EQ(ones.v[0], 0x408f276du);
  EXPECT_EQ(ones.v[1], 0x41c83b0eu);
  EXPECT_EQ(ones.v[2], 0xa20bc7c6u);
  EXPECT_EQ(ones.v[3], 0x6d5451fdu);
  const philox::Block pi = philox::philox4x32_10(
      {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u);
  EXPECT_EQ(pi.v[0], 0xd16cfe09u);
  EXPECT_EQ(pi.v[1], 0x94fdccebu);
  EXPECT_EQ(pi.v[2], 0x5001e420u);
  EXPECT_EQ(pi.v[3], 0x24126ea1u);
}

TEST(Philox, PortableLogAndSinCosAreAccurate) {
  double worst_log = 0, worst_trig = 0;
  for (uint32_t i = 1; i < (1u << 24); i += 997) {
    const float u = static_cast<float>(i) * 0x1p-24f;
    worst_log = std::max(worst_log, std::fabs(philox::log_unit(u) - std::log(static_cast<double>(u))));
    float s, c;
    philox::sincos_turn(u, &s, &c);
    const double angle = 2.0 * M_PI * u;
    worst_trig = std::max({worst_trig, std::fabs(s - std::sin(angle)), std::fabs(c - std::cos(angle))});
  }
  EXPECT_LT(worst_log, 4e-6);  // |log u| reaches 16.6; a few float ulps of that
  EXPECT_LT(worst_trig, 4e-7);
}

TEST(Philox, FillIsReproducibleAndOffsetAddressed) {
  Tensor a = Tensor::empty({1000}, DType::f32);
  Tensor b = Tensor::empty({500}, DType::f32);
  fill_normal(a, 42, 0);
  fill_normal(b, 42, 500);  // the second half of the same stream
  for (int i = 0; i < 500; ++i) ASSERT_EQ(a.item(500 + i), b.item(i));
  Tensor c = Tensor::empty({1000}, DType::f32);
  fill_normal(c, 43, 0);
  int same = 0;
  for (int i = 0; i < 1000; ++i) same += a.item(i) == c.item(i);
  EXPECT_LT(same, 5);
}

TEST(Philox, NormalAndUniformMoments) {
  Tensor n = Tensor::empty({1 << 20}, DType::f32);
  Tensor u = Tensor::empty({1 << 20}, DType::f32);
  fill_normal(n, 7, 0, 1.0f, 2.0f);
  fill_uniform(u, 7, 0, -1.0f, 3.0f);
  double ns = 0, ns2 = 0, us = 0, umin = 1e9, umax = -1e9;
  for (int64_t i = 0; i < n.numel(); ++i) {
    const double x = n.item(i), y = u.item(i);
    ns += x;
    ns2 += x * x;
    us += y;
    umin = std::min(umin, y);
    umax = std::max(umax, y);
  }
  const double count = static_cast<double>(n.numel());
  const double mean = ns / count, var = ns2 / count - mean * mean;
  EXPECT_NEAR(mean, 1.0, 0.01);
  EXPECT_NEAR(var, 4.0, 0.03);
  EXPECT_NEAR(us / count, 1.0, 0.01);
  EXPECT_GE(umin, -1.0);
  EXPECT_LT(umax, 3.0);
}

TEST(RandomGpu, FillMatchesCpuBitForBit) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (int pass = 0; pass < 2; ++pass) {
    Tensor cpu = Tensor::empty({4099}, DType::f32);
    Tensor gpu = Tensor::empty({4099}, DType::f32, Device::cuda());
    if (pass == 0) {
      fill_normal(cpu, 1234, 77, 0.5f, 0.02f);
      fill_normal(gpu, 1234, 77, 0.5f, 0.02f);
    } else {
      fill_uniform(cpu, 99, 3, -2.0f, 2.0f);
      fill_uniform(gpu, 99, 3, -2.0f, 2.0f);
    }
    const std::vector<double> a = cpu.to_doubles(), b = gpu.to_doubles();
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << "element " << i << " pass " << pass;
  }
}

}  // namespace
}  // namespace amber
