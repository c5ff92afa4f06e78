#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <functional>
#include <map>
#include <random>

#include "amber/core/dtype.h"
#include "amber/core/error.h"

namespace amber {
namespace {

// Brute-force round-to-nearest-even over every code of a narrow format: the
// reference the fast encoders are checked against.
struct NarrowFormat {
  int bits;
  std::function<float(uint32_t)> decode;
  std::function<uint32_t(float)> encode;
  bool saturates;  // no infinity: overflow clamps to the largest finite value
};

struct CodeTable {
  std::map<double, uint32_t> positive;  // value -> code, sign bit clear
  double max_finite = 0;
  uint32_t max_code = 0, inf_code = 0;
  bool has_inf = false;
  explicit CodeTable(const NarrowFormat& f) {
    for (uint32_t c = 0; c < (1u << (f.bits - 1)); ++c) {
      const double v = f.decode(c);
      if (std::isnan(v)) continue;
      if (std::isinf(v)) {
        has_inf = true;
        inf_code = c;
        continue;
      }
      positive[v] = c;
      if (v > max_finite) max_finite = v, max_code = c;
    }
  }
};

uint32_t reference_encode(const NarrowFormat& f, const CodeTable& table, float x) {
  const auto& [positive, max_finite, max_code, inf_code, has_inf] = table;
  const uint32_t sign = std::signbit(x) ? 1u << (f.bits - 1) : 0;
  const double a = std::fabs(static_cast<double>(x));
  if (std::isinf(x)) return sign | (has_inf ? inf_code : max_code);
  auto hi = positive.lower_bound(a);
  if (hi == positive.end()) {
    // Beyond the largest finite value: the next "value" up is max + one ulp.
    const double ulp = max_finite - std::prev(positive.end(), 2)->first;
    const double mid = max_finite + ulp / 2;
    if (f.saturates || a < mid) return sign | max_code;
    if (a == mid && (max_code & 1) == 0) return sign | max_code;
    return sign | inf_code;
  }
  if (hi->first == a || hi == positive.begin()) return sign | hi->second;
  auto lo = std::prev(hi);
  const double dl = a - lo->first, dh = hi->first - a;
  if (dl < dh) return sign | lo->second;
  if (dh < dl) return sign | hi->second;
  return sign | ((lo->second & 1) == 0 ? lo->second : hi->second);
}

void check_format(const NarrowFormat& f, const char* name) {
  // Every code decodes and re-encodes to itself (NaN to some NaN).
  for (uint32_t c = 0; c < (1u << f.bits); ++c) {
    const float v = f.decode(c);
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(f.decode(f.encode(v)))) << name << " code " << c;
    } else {
      EXPECT_EQ(f.encode(v), c) << name << " code " << c << " value " << v;
    }
  }
  // Random floats spanning the whole range, plus exact midpoints.
  const CodeTable table(f);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> log_mag(-30.0f, 20.0f);
  for (int i = 0; i < 20000; ++i) {
    float x = std::exp2(log_mag(rng)) * (rng() & 1 ? 1.0f : -1.0f);
    if (i % 3 == 0) {
      const uint32_t c = rng() & ((1u << (f.bits - 1)) - 2);
      x = 0.5f * (f.decode(c) + f.decode(c + 1));  // tie between neighbours
      if (!std::isfinite(x)) continue;
    }
    EXPECT_EQ(f.encode(x), reference_encode(f, table, x)) << name << " x=" << x;
  }
}

TEST(DType, Float16RoundsToNearestEven) {
  check_format({16, f16_to_float, [](float x) { return uint32_t{f16_from_float(x)}; }, false}, "f16");
  EXPECT_EQ(f16_from_float(65520.0f), 0x7C00);  // midpoint above max -> inf
  EXPECT_EQ(f16_from_float(65519.0f), 0x7BFF);
}

TEST(DType, E4M3RoundsToNearestEvenAndSaturates) {
  check_format({8, f8e4m3_to_float, [](float x) { return uint32_t{f8e4m3_from_float(x)}; }, true}, "e4m3");
  EXPECT_EQ(f8e4m3_to_float(f8e4m3_from_float(1e6f)), 448.0f);
  EXPECT_EQ(f8e4m3_to_float(f8e4m3_from_float(-INFINITY)), -448.0f);
  EXPECT_TRUE(std::isnan(f8e4m3_to_float(f8e4m3_from_float(NAN))));
  EXPECT_EQ(f8e4m3_to_float(1), 0x1p-9f);  // smallest subnormal
}

TEST(DType, E2M1RoundsToNearestEvenAndSaturates) {
  check_format({4, e2m1_to_float, [](float x) { return uint32_t{e2m1_from_float(x)}; }, true}, "e2m1");
  const float values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (uint8_t c = 0; c < 16; ++c) EXPECT_EQ(e2m1_to_float(c), (c & 8 ? -1.0f : 1.0f) * values[c & 7]);
  EXPECT_EQ(e2m1_from_float(-INFINITY), 0xF);
  EXPECT_EQ(e2m1_from_float(7.0f), 0x7);
  EXPECT_EQ(e2m1_from_float(NAN), 0x0);  // no NaN code: MXFP4 flags NaN in its scale
  EXPECT_EQ(e2m1_to_float(0xF3), 1.5f);  // only the low nibble is read
}

TEST(DType, U8IsAnUnsignedByte) {
  EXPECT_EQ(dtype_from_name("u8"), DType::u8);
  EXPECT_EQ(dtype_name(DType::u8), "u8");
  EXPECT_EQ(dtype_size(DType::u8), 1u);
  EXPECT_FALSE(is_floating(DType::u8));
  const uint8_t bytes[3] = {0, 0x96, 255};
  float f[3];
  convert(bytes, DType::u8, f, DType::f32, 3);
  EXPECT_EQ(f[1], 150.0f);
  EXPECT_EQ(f[2], 255.0f);
  uint8_t back[3];
  convert(f, DType::f32, back, DType::u8, 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(back[i], bytes[i]);
  uint8_t stored = 0;
  store_from_double(&stored, DType::u8, 0, 200.0);
  EXPECT_EQ(load_as_double(&stored, DType::u8, 0), 200.0);
}

TEST(DType, E5M2RoundsToNearestEven) {
  check_format({8, f8e5m2_to_float, [](float x) { return uint32_t{f8e5m2_from_float(x)}; }, false}, "e5m2");
  EXPECT_TRUE(std::isinf(f8e5m2_to_float(f8e5m2_from_float(1e6f))));
  EXPECT_EQ(f8e5m2_to_float(f8e5m2_from_float(57344.0f)), 57344.0f);
}

TEST(DType, BFloat16MatchesBruteForceOnRandomBits) {
  std::mt19937 rng(11);
  for (int i = 0; i < 200000; ++i) {
    const float x = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    const uint16_t got = bf16_from_float(x);
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(bf16_to_float(got)));
      continue;
    }
    // Candidates: truncation and the next code away from zero.
    const uint16_t down = static_cast<uint16_t>(std::bit_cast<uint32_t>(x) >> 16);
    const uint16_t up = static_cast<uint16_t>(down + 1);
    const double dd = std::fabs(static_cast<double>(x) - bf16_to_float(down));
    // Past the largest finite value the next code is infinity, which sits where 2^128
    // would: that places the overflow threshold at max + half an ulp.
    const double up_value = std::isinf(bf16_to_float(up)) ? std::copysign(0x1p128, x) : bf16_to_float(up);
    const double du = std::fabs(up_value - x);
    uint16_t want = dd < du ? down : du < dd ? up : ((down & 1) ? up : down);
    if (std::isinf(bf16_to_float(down))) want = down;
    EXPECT_EQ(got, want) << "x=" << x;
  }
  EXPECT_EQ(bf16_to_float(bf16_from_float(1.00390625f)), 1.0f);    // tie -> even (down)
  EXPECT_EQ(bf16_to_float(bf16_from_float(1.01171875f)), 1.015625f);  // tie -> even (up)
}

TEST(DType, E8M0IsPowersOfTwoWithTiesToEvenCode) {
  EXPECT_EQ(e8m0_to_float(127), 1.0f);
  EXPECT_EQ(e8m0_from_float(1.0f), 127);
  EXPECT_EQ(e8m0_from_float(1.4f), 127);
  EXPECT_EQ(e8m0_from_float(1.6f), 128);
  EXPECT_EQ(e8m0_from_float(1.5f), 128);  // tie between codes 127 and 128 -> even 128
  EXPECT_EQ(e8m0_from_float(3.0f), 128);  // tie between codes 128 and 129 -> even 128
  EXPECT_EQ(e8m0_from_float(0x1p-127f), 0);
  EXPECT_EQ(e8m0_from_float(0.0f), 0xFF);
  EXPECT_EQ(e8m0_from_float(-2.0f), 0xFF);
  EXPECT_TRUE(std::isnan(e8m0_to_float(0xFF)));
  for (int c = 0; c < 255; ++c) EXPECT_EQ(e8m0_from_float(e8m0_to_float(static_cast<uint8_t>(c))), c);
}

TEST(DType, ConvertBetweenAnyPairAndNames) {
  const float values[4] = {1.5f, -2.25f, 1000.0f, 0.0078125f};
  uint16_t half[4];
  float back[4];
  convert(values, DType::f32, half, DType::f16, 4);
  convert(half, DType::f16, back, DType::f32, 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(back[i], values[i]);
  int32_t ints[4];
  convert(values, DType::f32, ints, DType::i32, 4);
  EXPECT_EQ(ints[1], -2);
  EXPECT_EQ(dtype_from_name("bf16"), DType::bf16);
  EXPECT_EQ(dtype_size(DType::f8e4m3), 1u);
  try {
    dtype_from_name("bfloat");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bfloat"), std::string::npos);
  }
}

}  // namespace
}  // namespace amber
