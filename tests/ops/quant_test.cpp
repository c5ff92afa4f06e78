// The quantizers of ops/quant.h: the GPU's scalar codes against the core's conversions,
// each format's scale rule on hand-made blocks, round-trip error bounds, packing, shape
// errors, and (QuantGpu) the CUDA kernels bit-identical to the CPU on fresh inputs.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "amber/core/error.h"
#include "amber/ops/cuda/quant/quant_codes.h"
#include "amber/ops/activation.h"
#include "amber/ops/glu_linear.h"
#include "amber/ops/quant.h"
#include "testing.h"

namespace amber {
namespace {

namespace qc = quant_codes;

constexpr float kE2m1Values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

uint32_t bits(float x) { return std::bit_cast<uint32_t>(x); }

const uint8_t* bytes(const Tensor& t) { return static_cast<const uint8_t*>(t.raw()); }

Tensor from_floats(const std::vector<float>& v, Shape shape, DType dt = DType::f32) {
  return Tensor::from_vector(v, shape).to(dt);
}

struct Quantized {
  Tensor values, scales;
};

Quantized fp8_rows(const Tensor& x) {
  Quantized q{Tensor::empty(x.shape(), DType::f8e4m3, x.device()),
        Tensor::empty(fp8_rows_scales_shape(x.shape()), DType::f32, x.device())};
  quantize_fp8_rows(x, q.values, q.scales);
  return q;
}

Quantized fp8_blocks(const Tensor& w) {
  Quantized q{Tensor::empty(w.shape(), DType::f8e4m3, w.device()),
        Tensor::empty(fp8_blocks_scales_shape(w.shape()), DType::f32, w.device())};
  quantize_fp8_blocks(w, q.values, q.scales);
  return q;
}

Quantized mxfp4(const Tensor& w) {
  Quantized q{Tensor::empty(mxfp4_values_shape(w.shape()), DType::u8, w.device()),
        Tensor::empty(mx_scales_shape(w.shape()), DType::e8m0, w.device())};
  quantize_mxfp4(w, q.values, q.scales);
  return q;
}

Quantized mxfp8(const Tensor& w) {
  Quantized q{Tensor::empty(w.shape(), DType::f8e4m3, w.device()),
        Tensor::empty(mx_scales_shape(w.shape()), DType::e8m0, w.device())};
  quantize_mxfp8(w, q.values, q.scales);
  return q;
}

// Random values whose magnitude changes by powers of two from block to block (every
// 32 elements along a row, so FP8 blocks and MXFP4 blocks see different ranges), with
// outliers: about one element in 97 is 300 times larger.
Tensor varied(Shape shape, DType dt, uint64_t seed) {
  Tensor t = testing::random_tensor(shape, DType::f64, seed);
  double* p = t.data<double>();
  const int64_t cols = shape[shape.ndim() - 1];
  std::mt19937 rng(static_cast<uint32_t>(seed));
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int64_t block = i / cols * 7 + i % cols / 32;
    p[i] *= std::ldexp(1.0, static_cast<int>(block % 23) - 11);
    if (rng() % 97 == 0) p[i] *= 300.0;
  }
  return t.to(dt);
}

// ---- scalar codes ----------------------------------------------------------------------

TEST(QuantCodes, E2m1DecodesEveryCodeAndEncodesEveryValueExactly) {
  for (uint8_t c = 0; c < 16; ++c) {
    const float want = (c & 8 ? -1.0f : 1.0f) * kE2m1Values[c & 7];
    EXPECT_EQ(bits(e2m1_to_float(c)), bits(want)) << "core, code " << int(c);
    EXPECT_EQ(bits(qc::e2m1_value(c)), bits(want)) << "gpu, code " << int(c);
    EXPECT_EQ(e2m1_from_float(want), c) << "core, value " << want;
    EXPECT_EQ(qc::e2m1_code(want), c) << "gpu, value " << want;
  }
}

TEST(QuantCodes, E2m1TiesGoToEvenSaturatesAndKeepsTheSignOfZero) {
  // (input, code): the seven midpoints go to the even code; just past them, the other.
  const std::vector<std::pair<float, uint8_t>> cases = {
      {0.25f, 0},  {0.75f, 2},  {1.25f, 2},  {1.75f, 4},  {2.5f, 4},  {3.5f, 6},  {5.0f, 6},
      {std::nextafter(0.25f, 1.0f), 1}, {std::nextafter(0.75f, 0.0f), 1}, {std::nextafter(1.25f, 2.0f), 3},
      {std::nextafter(1.75f, 0.0f), 3}, {std::nextafter(2.5f, 3.0f), 5},  {std::nextafter(3.5f, 0.0f), 5},
      {std::nextafter(5.0f, 6.0f), 7},  {6.0f, 7},   {6.99f, 7},  {1e30f, 7},  {INFINITY, 7},
      {-INFINITY, 15}, {-7.0f, 15}, {-0.0f, 8}, {-0.1f, 8}, {0.1f, 0}, {1e-40f, 0}, {NAN, 0}};
  for (const auto& [x, code] : cases) {
    EXPECT_EQ(e2m1_from_float(x), code) << "core, x = " << x;
    EXPECT_EQ(qc::e2m1_code(x), code) << "gpu, x = " << x;
  }
}

// Every float class the quantizers can meet: all codes' values, the midpoints between
// neighbouring codes and the floats either side of them, and a million random bit
// patterns (NaN, infinities and subnormals included).
TEST(QuantCodes, DeviceEncodersMatchTheCoreOnCodesMidpointsAndRandomBits) {
  std::vector<float> inputs;
  for (int c = 0; c < 256; ++c) {
    const float a = f8e4m3_to_float(static_cast<uint8_t>(c)), b = f8e4m3_to_float(static_cast<uint8_t>(c + 1));
    inputs.push_back(a);
    if (c % 128 != 127 && std::isfinite(a) && std::isfinite(b)) {
      const float mid = 0.5f * (a + b);
      inputs.insert(inputs.end(), {mid, std::nextafter(mid, -INFINITY), std::nextafter(mid, INFINITY)});
    }
  }
  for (int c = 0; c < 15; ++c) {
    const float mid = 0.5f * (e2m1_to_float(static_cast<uint8_t>(c)) + e2m1_to_float(static_cast<uint8_t>(c + 1)));
    inputs.insert(inputs.end(), {mid, std::nextafter(mid, -INFINITY), std::nextafter(mid, INFINITY)});
  }
  inputs.insert(inputs.end(), {464.0f, -464.0f, 448.5f, 0x1p-6f, 0x1p-10f, 0x1p-149f, INFINITY, -INFINITY, NAN});
  std::mt19937 rng(17);
  for (int i = 0; i < 1000000; ++i) inputs.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  int checked = 0;
  for (float x : inputs) {
    ASSERT_EQ(qc::e4m3_code(x), f8e4m3_from_float(x)) << "e4m3, x = " << x << " bits " << std::hex << bits(x);
    ASSERT_EQ(qc::e2m1_code(x), e2m1_from_float(x)) << "e2m1, x = " << x << " bits " << std::hex << bits(x);
    const float a = std::fabs(x);
    if (std::isfinite(a) && a > 0) {
      ASSERT_EQ(qc::floor_log2(a), std::ilogb(a)) << "x = " << x;
    }
    ++checked;
  }
  for (int c = 0; c < 256; ++c) {
    const float want = f8e4m3_to_float(static_cast<uint8_t>(c)), got = qc::e4m3_value(static_cast<uint8_t>(c));
    if (std::isnan(want))
      EXPECT_TRUE(std::isnan(got)) << "code " << c;
    else
      EXPECT_EQ(bits(got), bits(want)) << "code " << c;
    if (c < 255) {
      EXPECT_EQ(bits(qc::e8m0_value(static_cast<uint8_t>(c))), bits(e8m0_to_float(static_cast<uint8_t>(c))));
    }
  }
  EXPECT_GT(checked, 1000000);
}

// ---- FP8 rows ---------------------------------------------------------------------------

// The GPU quantizers divide 16-bit sources by a block's scale through its reciprocal
// (qc::divide_by_reciprocal). Every x of the format against every amax of the binades
// listed (by exponent field): the smallest scales that take that path (where a
// remainder could first lose bits), ordinary ones and the format's top. The e4m3 code
// must be x / scale's.
struct Format16 {
  float (*value)(uint16_t);
  int mantissa_bits;
  uint16_t finite_end;  // first non-finite magnitude's bits
};

void expect_reciprocal_division_codes_match(const Format16& f, const std::vector<uint16_t>& amax_exponent_fields) {
  std::vector<float> xs;
  for (uint32_t h = 0; h < 0x10000u; ++h)
    if ((h & 0x7FFFu) < f.finite_end) xs.push_back(f.value(static_cast<uint16_t>(h)));
  int64_t checked = 0;
  for (uint16_t field : amax_exponent_fields) {
    for (uint32_t m = 0; m < (1u << f.mantissa_bits); ++m) {
      const float amax = f.value(static_cast<uint16_t>((field << f.mantissa_bits) | m));
      const float scale = amax / 448.0f, reciprocal = 1.0f / scale;
      if (scale < qc::kReciprocalMinScale) continue;
      for (float x : xs) {
        if (std::fabs(x) > amax) continue;
        ASSERT_EQ(qc::e4m3_code(qc::divide_by_reciprocal(x, scale, reciprocal)), qc::e4m3_code(x / scale))
            << "x = " << x << " (bits " << std::hex << bits(x) << "), amax = " << amax;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, int64_t{1} << 20);
}

TEST(QuantCodes, DivisionThroughTheReciprocalEncodesAsTheQuotientForBf16) {
  // The binade where the path starts (amax from 448 * kReciprocalMinScale on) and the two above it.
  const auto start = static_cast<uint16_t>(std::ilogb(448.0f * qc::kReciprocalMinScale) + 127);
  const std::vector<uint16_t> fields = {start, uint16_t(start + 1), uint16_t(start + 2), 126, 127, 254};
  expect_reciprocal_division_codes_match({bf16_to_float, 7, 0x7F80}, fields);
}

TEST(QuantCodes, DivisionThroughTheReciprocalEncodesAsTheQuotientForF16) {
  // Every f16 amax, subnormal ones (field 0) included, takes the reciprocal.
  expect_reciprocal_division_codes_match({f16_to_float, 10, 0x7C00}, {0, 1, 15, 30});
}

// The block scale through 1/448 equals the IEEE quotient amax / 448 for every fp32 amax
// of the binades swept whole: the first two whose quotients are normal, two ordinary
// ones and the top one (the rest are these scaled by powers of two, which change
// neither the roundings nor the remainder's exactness); below the threshold it divides.
TEST(QuantCodes, ScaleThroughTheReciprocalOf448IsTheQuotient) {
  const int low = std::ilogb(qc::kScaleByReciprocalMinAmax);
  int64_t checked = 0;
  for (int binade : {low, low + 1, 0, 1, 127}) {
    const float start = std::ldexp(1.0f, binade);
    for (uint32_t m = 0; m < (1u << 23); ++m) {
      const float amax = bits_float(float_bits(start) + m);
      if (amax < qc::kScaleByReciprocalMinAmax) continue;
      ASSERT_EQ(float_bits(qc::fp8_scale_quotient(amax)), float_bits(amax / 448.0f)) << amax;
      ++checked;
    }
  }
  EXPECT_GT(checked, 4 * (1 << 23));
  // Below: the subnormal quotients the product form would miss, divided.
  for (float amax : {std::nextafter(qc::kScaleByReciprocalMinAmax, 0.0f), 1e-40f, 0x1p-149f, 0.0f})
    EXPECT_EQ(float_bits(qc::fp8_scale_quotient(amax)), float_bits(amax / 448.0f)) << amax;
}

TEST(QuantFp8Rows, ScaleIsAmaxOver448AndTheAmaxElementBecomes448) {
  // Row 0: amax a power of two (1); row 1: amax 448 (scale exactly 1); row 2: one below
  // 2 and row 3 just above it (the scale follows amax continuously).
  const int64_t k = 128;
  std::vector<float> x(4 * k);
  const float amax[4] = {1.0f, 448.0f, std::nextafter(2.0f, 0.0f), std::nextafter(2.0f, 4.0f)};
  for (int r = 0; r < 4; ++r)
    for (int64_t c = 0; c < k; ++c) x[r * k + c] = amax[r] * (c == 5 ? -1.0f : 0.01f * static_cast<float>(c % 50));
  const Quantized q = fp8_rows(from_floats(x, {4, k}));
  for (int r = 0; r < 4; ++r) {
    const float scale = q.scales.data<float>()[r];
    EXPECT_EQ(bits(scale), bits(amax[r] / 448.0f)) << "row " << r;
    EXPECT_EQ(bytes(q.values)[r * k + 5], 0xFE) << "row " << r << ": -amax is -448";
    for (int64_t c = 0; c < k; ++c)
      ASSERT_EQ(bytes(q.values)[r * k + c], f8e4m3_from_float(x[r * k + c] / scale)) << r << ", " << c;
  }
  EXPECT_EQ(q.scales.data<float>()[1], 1.0f);
}

TEST(QuantFp8Rows, ZeroBlockGetsScaleOneAndShortLastBlockItsOwnAmax) {
  // K = 300: blocks of 128, 128 and 44. Block 0 is zeros (one of them -0), block 1
  // holds an outlier, the short block 2 has amax 3.
  const int64_t k = 300;
  std::vector<float> x(k, 0.0f);
  x[7] = -0.0f;
  for (int64_t c = 128; c < 256; ++c) x[c] = 0.5f;
  x[200] = 1000.0f;
  for (int64_t c = 256; c < k; ++c) x[c] = c == 299 ? -3.0f : 1.0f;
  const Quantized q = fp8_rows(from_floats(x, {1, k}, DType::bf16));
  const float* s = q.scales.data<float>();
  EXPECT_EQ(q.scales.shape(), (Shape{1, 3}));
  EXPECT_EQ(s[0], 1.0f);
  EXPECT_EQ(bytes(q.values)[0], 0x00);
  EXPECT_EQ(bytes(q.values)[7], 0x80);  // -0 stays -0
  EXPECT_EQ(bits(s[1]), bits(1000.0f / 448.0f));
  EXPECT_EQ(bits(s[2]), bits(3.0f / 448.0f));
  EXPECT_EQ(bytes(q.values)[299], 0xFE);
  // 1 / (3 / 448) = 149.33.. -> e4m3 144 (step 16 in [128, 256)).
  EXPECT_EQ(f8e4m3_to_float(bytes(q.values)[256]), 144.0f);
}

TEST(QuantFp8Rows, OneElementRowAndNonFiniteBlocks) {
  const Quantized one = fp8_rows(from_floats({-3.0f}, {1, 1}));
  EXPECT_EQ(bits(one.scales.data<float>()[0]), bits(3.0f / 448.0f));
  EXPECT_EQ(bytes(one.values)[0], 0xFE);
  // A NaN or an infinity makes its block's scale NaN and its values NaN (0x7F); the
  // other blocks of the row are untouched.
  std::vector<float> x(2 * 256, 1.0f);
  x[3] = NAN;
  x[256 + 130] = -INFINITY;
  const Quantized q = fp8_rows(from_floats(x, {2, 256}));
  const float* s = q.scales.data<float>();
  EXPECT_TRUE(std::isnan(s[0]));
  EXPECT_EQ(bits(s[1]), bits(1.0f / 448.0f));
  EXPECT_EQ(bits(s[2]), bits(1.0f / 448.0f));
  EXPECT_TRUE(std::isnan(s[3]));
  for (int64_t c = 0; c < 512; ++c) {
    const bool poisoned = c < 128 || (c >= 384);
    ASSERT_EQ(bytes(q.values)[c], poisoned ? 0x7F : 0x7E) << c;
  }
  Tensor back = Tensor::empty({2, 256}, DType::f32);
  dequantize_fp8_rows(q.values, q.scales, back);
  EXPECT_TRUE(std::isnan(back.data<float>()[0]));
  EXPECT_EQ(back.data<float>()[128], 448.0f * (1.0f / 448.0f));
}

// Each element's error: y = x / s is rounded once in fp32 (relative 2^-24), then to e4m3
// (relative 2^-4 in the normal range, absolute 2^-10 below 2^-6); times s that is
// |x - q s| <= (2^-4 + 2^-22) |x| + 2^-10 s. The largest relative error seen must come
// close to 2^-4, or the inputs missed the coarse part of the grid.
TEST(QuantFp8Rows, RoundTripErrorStaysWithinTheE4m3Bound) {
  const Tensor x = varied({19, 2880}, DType::f32, 3);
  const Quantized q = fp8_rows(x);
  Tensor back = Tensor::empty(x.shape(), DType::f64);
  dequantize_fp8_rows(q.values, q.scales, back);
  const float* px = x.data<float>();
  const double* pb = back.data<double>();
  const float* s = q.scales.data<float>();
  double worst_relative = 0, worst_ratio = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double scale = s[i / 2880 * 23 + i % 2880 / 128];
    const double err = std::fabs(pb[i] - px[i]);
    const double bound = (0x1p-4 + 0x1p-22) * std::fabs(px[i]) + 0x1p-10 * scale;
    ASSERT_LE(err, bound) << "element " << i << " x = " << px[i];
    worst_ratio = std::max(worst_ratio, err / bound);
    if (std::fabs(px[i]) / scale >= 0x1p-6) worst_relative = std::max(worst_relative, err / std::fabs(px[i]));
  }
  std::cout << "fp8 rows: worst relative error " << worst_relative << " (bound 2^-4 = 0.0625), worst "
            << worst_ratio << " of the bound\n";
  EXPECT_GT(worst_relative, 0.055);
}

TEST(QuantFp8Rows, DequantizeIsOneFp32ProductRoundedOnce) {
  const Tensor x = varied({3, 200}, DType::f32, 4);
  const Quantized q = fp8_rows(x);
  Tensor f32 = Tensor::empty(x.shape(), DType::f32), bf16 = Tensor::empty(x.shape(), DType::bf16);
  Tensor f64 = Tensor::empty(x.shape(), DType::f64);
  dequantize_fp8_rows(q.values, q.scales, f32);
  dequantize_fp8_rows(q.values, q.scales, bf16);
  dequantize_fp8_rows(q.values, q.scales, f64);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float v = f8e4m3_to_float(bytes(q.values)[i]), s = q.scales.data<float>()[i / 200 * 2 + i % 200 / 128];
    ASSERT_EQ(bits(f32.data<float>()[i]), bits(v * s)) << i;
    ASSERT_EQ(static_cast<const uint16_t*>(bf16.raw())[i], bf16_from_float(v * s)) << i;
    ASSERT_EQ(f64.data<double>()[i], static_cast<double>(v) * s) << i;
  }
}

// ---- FP8 blocks -------------------------------------------------------------------------

// [E, N, K] = [2, 130, 200]: tiles of 128x128 cut both N and K short. The test finds each
// tile's amax itself and checks the scale and every code against the rule.
TEST(QuantFp8Blocks, EachTileOfEveryExpertScalesByItsOwnAmax) {
  const int64_t e = 2, n = 130, k = 200;
  Tensor w = varied({e, n, k}, DType::f32, 5);
  w.data<float>()[1 * n * k + 129 * k + 199] = -1e9f;  // beyond every other value, in a 2x72 tile
  const Quantized q = fp8_blocks(w);
  ASSERT_EQ(q.scales.shape(), (Shape{2, 2, 2}));
  const float* pw = w.data<float>();
  for (int64_t x = 0; x < e; ++x)
    for (int64_t tr = 0; tr < 2; ++tr)
      for (int64_t tc = 0; tc < 2; ++tc) {
        float amax = 0;
        for (int64_t r = tr * 128; r < std::min(n, tr * 128 + 128); ++r)
          for (int64_t c = tc * 128; c < std::min(k, tc * 128 + 128); ++c)
            amax = std::max(amax, std::fabs(pw[(x * n + r) * k + c]));
        const float scale = q.scales.data<float>()[(x * 2 + tr) * 2 + tc];
        ASSERT_EQ(bits(scale), bits(amax / 448.0f)) << "tile " << x << "," << tr << "," << tc;
        for (int64_t r = tr * 128; r < std::min(n, tr * 128 + 128); ++r)
          for (int64_t c = tc * 128; c < std::min(k, tc * 128 + 128); ++c) {
            const int64_t i = (x * n + r) * k + c;
            ASSERT_EQ(bytes(q.values)[i], f8e4m3_from_float(pw[i] / scale)) << i;
          }
      }
  EXPECT_EQ(q.scales.data<float>()[7], 1e9f / 448.0f);
  EXPECT_EQ(bytes(q.values)[2 * n * k - 1], 0xFE);
  Tensor back = Tensor::empty(w.shape(), DType::f64);
  dequantize_fp8_blocks(q.values, q.scales, back);
  EXPECT_EQ(back.data<double>()[2 * n * k - 1], -448.0 * static_cast<double>(1e9f / 448.0f));
}

// ---- MXFP4 ------------------------------------------------------------------------------

// Scale exponent floor(log2 amax) - 2 (+127 bias): amax 4 -> 2^0; one ulp below 4 ->
// 2^-1 (and 3.9999998 / 0.5 saturates to 6: the spec's floor clips the top of the
// block); one ulp above -> 2^0.
// Scales written through a column-major view (the dense FP8 product's layout) hold the
// values the contiguous layout does; the column quantizer is the row quantizer of the
// transpose; a tile's codes do not depend on its orientation, so the transposed copy
// is the quantization of w^T (with the scales transposed).
TEST(QuantFp8Layouts, StridedScalesColumnsAndTransposedTilesAgreeWithTheRowsAndTiles) {
  const Tensor x = varied({300, 200}, DType::bf16, 7);
  const Quantized rows = fp8_rows(x);
  Tensor storage = Tensor::empty({2, 300}, DType::f32), values = Tensor::empty(x.shape(), DType::f8e4m3);
  Tensor column_major = storage.transpose(0, 1);
  quantize_fp8_rows(x, values, column_major);
  EXPECT_EQ(std::memcmp(bytes(values), bytes(rows.values), values.bytes()), 0);
  EXPECT_EQ(column_major.contiguous().to_doubles(), rows.scales.to_doubles());
  Tensor dequantized = Tensor::empty(x.shape(), DType::f32), expected = Tensor::empty(x.shape(), DType::f32);
  dequantize_fp8_rows(values, column_major, dequantized);
  dequantize_fp8_rows(rows.values, rows.scales, expected);
  EXPECT_EQ(dequantized.to_doubles(), expected.to_doubles());

  const Quantized of_transpose = fp8_rows(x.transpose(0, 1).contiguous());
  Tensor columns = Tensor::empty({200, 300}, DType::f8e4m3), column_scales = Tensor::empty({200, 3}, DType::f32);
  quantize_fp8_columns(x, columns, column_scales);
  EXPECT_EQ(std::memcmp(bytes(columns), bytes(of_transpose.values), columns.bytes()), 0);
  EXPECT_EQ(column_scales.to_doubles(), of_transpose.scales.to_doubles());
  Tensor both = Tensor::empty(x.shape(), DType::f8e4m3), both_scales = Tensor::empty({300, 2}, DType::f32);
  Tensor both_t = Tensor::empty({200, 300}, DType::f8e4m3), both_t_scales = Tensor::empty({200, 3}, DType::f32);
  quantize_fp8_rows_and_columns(x, both, both_scales, both_t, both_t_scales);
  EXPECT_EQ(std::memcmp(bytes(both), bytes(rows.values), both.bytes()), 0);
  EXPECT_EQ(both_scales.to_doubles(), rows.scales.to_doubles());
  EXPECT_EQ(std::memcmp(bytes(both_t), bytes(of_transpose.values), both_t.bytes()), 0);
  EXPECT_EQ(both_t_scales.to_doubles(), of_transpose.scales.to_doubles());

  const Tensor w = varied({260, 300}, DType::bf16, 8);
  Tensor codes = Tensor::empty(w.shape(), DType::f8e4m3), tiles = Tensor::empty({3, 3}, DType::f32);
  Tensor transposed = Tensor::empty({300, 260}, DType::f8e4m3);
  quantize_fp8_blocks(w, codes, tiles, &transposed);
  const Quantized of_wt = fp8_blocks(w.transpose(0, 1).contiguous());
  EXPECT_EQ(std::memcmp(bytes(transposed), bytes(of_wt.values), transposed.bytes()), 0);
  EXPECT_EQ(tiles.transpose(0, 1).contiguous().to_doubles(), of_wt.scales.to_doubles());
}

// Stacked experts [E, N, K]: each matrix's transposed codes, with its scales written
// through the transposed view of [E, ceil(K/128), ceil(N/128)], are the quantization
// of that matrix's transpose (what an expert's input-gradient product reads).
TEST(QuantFp8Layouts, TransposedTilesOfStackedMatricesAreEachTransposeQuantized) {
  const Tensor w = varied({3, 260, 136}, DType::bf16, 9);
  Tensor codes = Tensor::empty(w.shape(), DType::f8e4m3), transposed = Tensor::empty({3, 136, 260}, DType::f8e4m3);
  Tensor t_scales = Tensor::empty({3, 2, 3}, DType::f32), scales = t_scales.transpose(1, 2);
  quantize_fp8_blocks(w, codes, scales, &transposed);
  for (int64_t e = 0; e < 3; ++e) {
    const Quantized of_wt = fp8_blocks(w.slice(0, e, e + 1).transpose(1, 2).contiguous());
    EXPECT_EQ(std::memcmp(bytes(transposed.slice(0, e, e + 1)), bytes(of_wt.values), of_wt.values.bytes()), 0) << e;
    EXPECT_EQ(t_scales.slice(0, e, e + 1).to_doubles(), of_wt.scales.to_doubles()) << e;
  }
}

TEST(QuantMxfp4, ScaleExponentIsFloorLog2AmaxMinusTwo) {
  const float amax[] = {4.0f, std::nextafter(4.0f, 0.0f), std::nextafter(4.0f, 8.0f), 6.0f, 7.99f,
                        0x1.8p127f, 0x1p-124f, 0x1p-130f, 0.0f};
  const uint8_t want[] = {127, 126, 127, 127, 127, 252, 1, 0, 0};
  const int blocks = sizeof(amax) / sizeof(amax[0]);
  std::vector<float> x(32 * blocks, 0.0f);
  for (int b = 0; b < blocks; ++b) x[32 * b + 3] = -amax[b];
  const Quantized q = mxfp4(from_floats(x, {blocks, 32}));
  for (int b = 0; b < blocks; ++b) {
    EXPECT_EQ(bytes(q.scales)[b], want[b]) << "amax " << amax[b];
    const uint8_t code = bytes(q.values)[16 * b + 1] >> 4;  // element 3: high nibble of byte 1
    const float scale = e8m0_to_float(want[b]);
    const float expect = b == 8 ? 0.0f : std::min(amax[b] / scale, 6.0f);
    EXPECT_EQ(e2m1_to_float(code), b == 8 ? 0.0f : -e2m1_to_float(e2m1_from_float(expect))) << "amax " << amax[b];
  }
  EXPECT_EQ(bytes(q.values)[16 * 1 + 1] >> 4, 0xF);  // 3.9999998 at scale 0.5 saturates to -6
  EXPECT_EQ(bytes(q.values)[16 * 4 + 1] >> 4, 0xF);  // 7.99 at scale 1 saturates to -6
  EXPECT_EQ(bytes(q.values)[16 * 7 + 1] >> 4, 0x8);  // 2^-130 / 2^-127 = 0.125 rounds to -0
}

// Element 2i sits in the low nibble of byte i, element 2i + 1 in the high nibble.
TEST(QuantMxfp4, PacksEvenElementsInTheLowNibble) {
  std::vector<float> x(64, 0.0f);
  x[0] = 4.0f, x[1] = -0.5f, x[2] = 1.5f, x[3] = 3.0f, x[31] = -6.0f;  // scale 2^0
  x[32] = 1.0f, x[33] = 0.25f;  // amax 1: scale 2^-2; 4 and 1 in units of the scale
  const Quantized q = mxfp4(from_floats(x, {2, 32}, DType::f16));
  EXPECT_EQ(bytes(q.values)[0], 0x96);   // 4 -> 0110, -0.5 -> 1001
  EXPECT_EQ(bytes(q.values)[1], 0x53);   // 1.5 -> 0011, 3 -> 0101
  EXPECT_EQ(bytes(q.values)[15], 0xF0);  // element 30 is 0, element 31 is -6
  EXPECT_EQ(bytes(q.scales)[0], 127);
  EXPECT_EQ(bytes(q.scales)[1], 125);
  EXPECT_EQ(bytes(q.values)[16], 0x26);  // 1 / 2^-2 = 4 -> 0110, 0.25 / 2^-2 = 1 -> 0010
  Tensor back = Tensor::empty({2, 32}, DType::f32);
  dequantize_mxfp4(q.values, q.scales, back);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(back.data<float>()[i], x[i]) << i;
}

TEST(QuantMxfp4, NonFiniteBlockGetsNanScaleAndZeroCodes) {
  std::vector<float> x(96, 1.0f);
  x[40] = NAN;
  x[95] = INFINITY;
  const Quantized q = mxfp4(from_floats(x, {3, 32}));
  EXPECT_EQ(bytes(q.scales)[0], 125);  // amax 1
  EXPECT_EQ(bytes(q.scales)[1], 0xFF);
  EXPECT_EQ(bytes(q.scales)[2], 0xFF);
  for (int i = 16; i < 48; ++i) ASSERT_EQ(bytes(q.values)[i], 0) << i;
  Tensor back = Tensor::empty({3, 32}, DType::bf16);
  dequantize_mxfp4(q.values, q.scales, back);
  const std::vector<double> b = back.to_doubles();
  EXPECT_EQ(b[0], 1.0);
  for (int i = 32; i < 96; ++i) ASSERT_TRUE(std::isnan(b[i])) << i;
}

// With X the block's scale, an element with |x| <= 6X is off by at most half the e2m1
// step at its magnitude (X/4 below 2X, X/2 below 4X, X up to 6X); above 6X (possible up
// to 8X, as the scale is floor-based) it saturates to exactly +-6X.
TEST(QuantMxfp4, RoundTripErrorIsHalfAStepOrSaturation) {
  const Tensor w = varied({4, 37, 2880}, DType::bf16, 6);
  const Quantized q = mxfp4(w);
  Tensor back = Tensor::empty(w.shape(), DType::f64);
  dequantize_mxfp4(q.values, q.scales, back);
  const std::vector<double> x = w.to_doubles();
  const double* pb = back.data<double>();
  int64_t saturated = 0;
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double scale = e8m0_to_float(bytes(q.scales)[i / 32]), a = std::fabs(x[i]) / scale;
    const double err = std::fabs(pb[i] - x[i]) / scale;
    if (a > 6) {
      ASSERT_EQ(pb[i], std::copysign(6 * scale, x[i])) << i;
      ++saturated;
      continue;
    }
    const double half_step = a <= 2 ? 0.25 : a <= 4 ? 0.5 : 1.0;
    ASSERT_LE(err, half_step) << "element " << i << " x = " << x[i];
    worst = std::max(worst, err / half_step);
  }
  std::cout << "mxfp4: worst error " << worst << " of half a step, " << saturated << " of " << x.size()
            << " saturated\n";
  EXPECT_EQ(worst, 1.0);  // ties occur in bf16 inputs, and sit exactly half a step away
  EXPECT_GT(saturated, 0);
}

// ---- MXFP8 ------------------------------------------------------------------------------

// Scale exponent floor(log2 amax) - 8 (+127 bias; 8 is e4m3's largest exponent, 448 =
// 1.75 * 2^8): amax 256 -> 2^0; one ulp below -> 2^-1 (and 255.99998 / 0.5 saturates to
// 448: the spec's floor clips the top of the block); 448 and 511 -> 2^0 (511 saturates).
// The largest finite amax gives code 246; tiny blocks clamp to 2^-127.
TEST(QuantMxfp8, ScaleExponentIsFloorLog2AmaxMinusEight) {
  const float amax[] = {256.0f, std::nextafter(256.0f, 0.0f), 448.0f, 511.0f, 0x1.fffffep127f, 0x1p-118f,
                        0x1p-130f, 0.0f};
  const uint8_t want[] = {127, 126, 127, 127, 246, 1, 0, 0};
  const int blocks = sizeof(amax) / sizeof(amax[0]);
  std::vector<float> x(32 * blocks, 0.0f);
  for (int b = 0; b < blocks; ++b) x[32 * b + 5] = -amax[b];
  const Quantized q = mxfp8(from_floats(x, {blocks, 32}));
  for (int b = 0; b < blocks; ++b) {
    EXPECT_EQ(bytes(q.scales)[b], want[b]) << "amax " << amax[b];
    const float scale = e8m0_to_float(want[b]);
    EXPECT_EQ(bytes(q.values)[32 * b + 5], f8e4m3_from_float(-amax[b] / scale)) << "amax " << amax[b];
  }
  EXPECT_EQ(f8e4m3_to_float(bytes(q.values)[32 * 1 + 5]), -448.0f);  // clipped by the floor
  EXPECT_EQ(f8e4m3_to_float(bytes(q.values)[32 * 3 + 5]), -448.0f);  // 511 saturates
  EXPECT_EQ(f8e4m3_to_float(bytes(q.values)[32 * 6 + 5]), -0x1p-3f);  // 2^-130 / 2^-127
}

TEST(QuantMxfp8, NonFiniteBlockGetsNanScaleAndZeroCodes) {
  std::vector<float> x(96, 1.0f);
  x[40] = NAN;
  x[95] = -INFINITY;
  const Quantized q = mxfp8(from_floats(x, {3, 32}, DType::bf16));
  EXPECT_EQ(bytes(q.scales)[0], 119);  // amax 1: 2^(0 - 8)
  EXPECT_EQ(bytes(q.values)[0], f8e4m3_from_float(256.0f));
  EXPECT_EQ(bytes(q.scales)[1], 0xFF);
  EXPECT_EQ(bytes(q.scales)[2], 0xFF);
  for (int i = 32; i < 96; ++i) ASSERT_EQ(bytes(q.values)[i], 0) << i;
  Tensor back = Tensor::empty({3, 32}, DType::f32);
  dequantize_mxfp8(q.values, q.scales, back);
  const std::vector<double> b = back.to_doubles();
  for (int i = 0; i < 32; ++i) EXPECT_EQ(b[i], 1.0) << i;
  for (int i = 32; i < 96; ++i) ASSERT_TRUE(std::isnan(b[i])) << i;
}

// Each element: y = x / X is exact (X a power of two, short of underflow), then rounded
// to e4m3: within half a step (relative 2^-4 of |y| for normal y >= 2^-6, absolute 2^-10
// below); |y| in (448, 512) saturates to 448 exactly. The dequantized product is exact.
TEST(QuantMxfp8, RoundTripErrorIsHalfAStepOrSaturation) {
  const Tensor w = varied({4, 37, 2880}, DType::bf16, 7);
  const Quantized q = mxfp8(w);
  Tensor back = Tensor::empty(w.shape(), DType::f64);
  dequantize_mxfp8(q.values, q.scales, back);
  const std::vector<double> x = w.to_doubles();
  const double* pb = back.data<double>();
  int64_t saturated = 0;
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double scale = e8m0_to_float(bytes(q.scales)[i / 32]), y = std::fabs(x[i]) / scale;
    ASSERT_LT(y, 512.0) << i;
    if (y > 448) {
      ASSERT_EQ(pb[i], std::copysign(448 * scale, x[i])) << i;
      ++saturated;
      continue;
    }
    const double half_step = y >= 0x1p-6 ? std::ldexp(1.0, std::ilogb(y) - 4) : 0x1p-10;
    const double err = std::fabs(pb[i] - x[i]) / scale;
    ASSERT_LE(err, half_step) << "element " << i << " x = " << x[i];
    worst = std::max(worst, err / half_step);
  }
  std::cout << "mxfp8: worst error " << worst << " of half a step, " << saturated << " of " << x.size()
            << " saturated\n";
  EXPECT_GT(worst, 0.9);
  EXPECT_GT(saturated, 0);
}

// ---- errors -----------------------------------------------------------------------------

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(QuantErrors, BadShapesAndDtypesNameTheShape) {
  Tensor x = Tensor::zeros({4, 300}, DType::f32);
  Tensor values = Tensor::empty({4, 300}, DType::f8e4m3), scales = Tensor::empty({4, 2}, DType::f32);
  std::string m = error_of([&] { quantize_fp8_rows(x, values, scales); });
  EXPECT_NE(m.find("quantize_fp8_rows: scales [4, 2] f32 must be [4, 3] f32 for x [4, 300]"), std::string::npos) << m;

  Tensor x3 = Tensor::zeros({2, 4, 300}, DType::f32);
  m = error_of([&] { quantize_fp8_rows(x3, values, scales); });
  EXPECT_NE(m.find("x [2, 4, 300] must be [M, K]"), std::string::npos) << m;

  Tensor wrong = Tensor::empty({4, 300}, DType::bf16), good_scales = Tensor::empty({4, 3}, DType::f32);
  m = error_of([&] { quantize_fp8_rows(x, wrong, good_scales); });
  EXPECT_NE(m.find("values [4, 300] bf16 must be [4, 300] f8e4m3"), std::string::npos) << m;

  m = error_of([&] { quantize_fp8_rows(x.to(DType::f64), values, good_scales); });
  EXPECT_NE(m.find("x [4, 300] is f64"), std::string::npos) << m;

  // Both layouts: the transposed outputs are named as such.
  Tensor t_untransposed = Tensor::empty({4, 300}, DType::f8e4m3), t_scales = Tensor::empty({300, 1}, DType::f32);
  m = error_of([&] { quantize_fp8_rows_and_columns(x, values, good_scales, t_untransposed, t_scales); });
  EXPECT_NE(m.find("quantize_fp8_rows_and_columns: transposed values [4, 300] f8e4m3 must be [300, 4] f8e4m3"),
            std::string::npos)
      << m;

  Tensor w = Tensor::zeros({3, 130, 200}, DType::bf16);
  Tensor wv = Tensor::empty({3, 130, 200}, DType::f8e4m3), ws = Tensor::empty({3, 1, 2}, DType::f32);
  m = error_of([&] { quantize_fp8_blocks(w, wv, ws); });
  EXPECT_NE(m.find("scales [3, 1, 2] f32 must be [3, 2, 2] f32 for w [3, 130, 200]"), std::string::npos) << m;

  Tensor w30 = Tensor::zeros({4, 30}, DType::f32);
  Tensor v15 = Tensor::empty({4, 15}, DType::u8), s1 = Tensor::empty({4, 1}, DType::e8m0);
  m = error_of([&] { quantize_mxfp4(w30, v15, s1); });
  EXPECT_NE(m.find("w [4, 30] must be [..., K] with K a multiple of 32"), std::string::npos) << m;

  Tensor w64 = Tensor::zeros({4, 64}, DType::f32);
  Tensor v32 = Tensor::empty({4, 32}, DType::u8), s2 = Tensor::empty({4, 2}, DType::e8m0);
  Tensor v32_bytes_as_e4m3 = Tensor::empty({4, 32}, DType::f8e4m3);
  m = error_of([&] { quantize_mxfp4(w64, v32_bytes_as_e4m3, s2); });
  EXPECT_NE(m.find("values [4, 32] f8e4m3 must be [4, 32] u8 for w [4, 64]"), std::string::npos) << m;

  Tensor f16_out = Tensor::empty({4, 64}, DType::f16);
  m = error_of([&] { dequantize_mxfp4(v32, s2, f16_out); });
  EXPECT_NE(m.find("dequantize_mxfp4: w [4, 64] is f16"), std::string::npos) << m;

  Tensor e30 = Tensor::empty({4, 30}, DType::f8e4m3);
  m = error_of([&] { quantize_mxfp8(w30, e30, s1); });
  EXPECT_NE(m.find("quantize_mxfp8: w [4, 30] must be [..., K] with K a multiple of 32"), std::string::npos) << m;
  m = error_of([&] { quantize_mxfp8(w64, v32, s2); });
  EXPECT_NE(m.find("values [4, 32] u8 must be [4, 64] f8e4m3 for w [4, 64]"), std::string::npos) << m;
}

// ---- GPU against the CPU ----------------------------------------------------------------

// On the CPU the GLU's backward quantized is the two ops through the caller's dgate_up;
// shapes that do not match name what is wrong before anything is written.
TEST(QuantGlu, BackwardFp8IsTheGluBackwardThenTheQuantizer) {
  const Tensor dh = varied({40, 160}, DType::bf16, 80), gate_up = varied({40, 320}, DType::bf16, 81);
  Tensor dgate_up = Tensor::empty({40, 320}, DType::bf16), expected = Tensor::empty({40, 320}, DType::bf16);
  swiglu_backward(dh, gate_up, expected);
  const Quantized rows = fp8_rows(expected), columns = fp8_rows(expected.transpose(0, 1).contiguous());
  Tensor values = Tensor::empty(rows.values.shape(), DType::f8e4m3), scales = Tensor::empty(rows.scales.shape(), DType::f32);
  Tensor t_values = Tensor::empty(columns.values.shape(), DType::f8e4m3);
  Tensor t_scales = Tensor::empty(columns.scales.shape(), DType::f32);
  EXPECT_FALSE(glu_backward_fp8_rows_and_columns(Glu::swiglu, dh, gate_up, dgate_up, values, scales, t_values, t_scales));
  EXPECT_EQ(std::memcmp(dgate_up.raw(), expected.raw(), expected.bytes()), 0);
  for (const auto& [got, want] : {std::pair{&values, &rows.values}, std::pair{&scales, &rows.scales},
                                  std::pair{&t_values, &columns.values}, std::pair{&t_scales, &columns.scales}})
    EXPECT_EQ(std::memcmp(got->raw(), want->raw(), want->bytes()), 0);
  Tensor rows_dgate_up = Tensor::empty({40, 320}, DType::bf16);
  Tensor rows_values = Tensor::empty(rows.values.shape(), DType::f8e4m3);
  Tensor rows_scales = Tensor::empty(rows.scales.shape(), DType::f32);
  EXPECT_FALSE(glu_backward_fp8_rows(Glu::swiglu, dh, gate_up, rows_dgate_up, rows_values, rows_scales));
  for (const auto& [got, want] : {std::pair<const Tensor*, const Tensor*>{&rows_dgate_up, &expected},
                                  std::pair<const Tensor*, const Tensor*>{&rows_values, &rows.values},
                                  std::pair<const Tensor*, const Tensor*>{&rows_scales, &rows.scales}})
    EXPECT_EQ(std::memcmp(got->raw(), want->raw(), want->bytes()), 0);

  const auto message = [&](Tensor& d, Tensor& v) {
    try {
      glu_backward_fp8_rows_and_columns(Glu::swiglu, dh, gate_up, d, v, scales, t_values, t_scales);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  Tensor short_dgate_up = Tensor::empty({40, 300}, DType::bf16), f32_dgate_up = Tensor::empty({40, 320}, DType::f32);
  Tensor short_values = Tensor::empty({40, 300}, DType::f8e4m3);
  EXPECT_NE(message(short_dgate_up, values).find("dgate_up [40, 300] bf16 must be [N, 2H] (dgate_up in dh's dtype)"),
            std::string::npos);
  EXPECT_NE(message(f32_dgate_up, values).find("must be [N, 2H] (dgate_up in dh's dtype) for dh [40, 160] bf16"),
            std::string::npos);
  EXPECT_NE(message(dgate_up, short_values).find("values [40, 300] f8e4m3 must be [40, 320] f8e4m3"),
            std::string::npos);
  const auto rows_message = [&](Tensor& d, Tensor& v) {
    try {
      glu_backward_fp8_rows(Glu::swiglu, dh, gate_up, d, v, rows_scales);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(rows_message(short_dgate_up, rows_values).find("glu_backward_fp8_rows: gate_up [40, 320] and dgate_up [40, 300]"),
            std::string::npos);
  EXPECT_NE(rows_message(rows_dgate_up, short_values).find("values [40, 300] f8e4m3 must be [40, 320] f8e4m3"),
            std::string::npos);
}

#define REQUIRE_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device"

Tensor gpu(const Tensor& t) { return t.to(Device::cuda()); }

// The GPU's outputs start as 0xA5 bytes, so an element the kernel skips shows.
Tensor poisoned(Shape shape, DType dt) {
  Tensor t = Tensor::empty(shape, dt);
  std::memset(t.raw(), 0xA5, t.bytes());
  return gpu(t);
}

void expect_same_bytes(const std::string& what, const Tensor& on_gpu, const Tensor& on_cpu) {
  const Tensor g = on_gpu.to(Device::cpu());
  ASSERT_EQ(g.bytes(), on_cpu.bytes()) << what;
  const uint8_t *a = bytes(g), *b = bytes(on_cpu);
  int64_t differ = 0, first = -1;
  for (size_t i = 0; i < g.bytes(); ++i)
    if (a[i] != b[i]) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++differ;
    }
  EXPECT_EQ(differ, 0) << what << ": " << differ << " bytes differ, first at byte " << first;
}

// The dequantized values as doubles, NaN equal to NaN (its payload is the hardware's).
void expect_same_values(const std::string& what, const Tensor& on_gpu, const Tensor& on_cpu) {
  const std::vector<double> a = on_gpu.to(Device::cpu()).to_doubles(), b = on_cpu.to_doubles();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    if (!(std::isnan(a[i]) && std::isnan(b[i]))) {
      ASSERT_EQ(a[i], b[i]) << what << " at " << i;
    }
}

// A contiguous tensor whose data starts one element past an allocation's start, so
// every vectorised path falls back to its scalar one.
Tensor misaligned_gpu(const Tensor& t) {
  Tensor flat = Tensor::empty({t.numel() + 1}, t.dtype(), Device::cuda());
  Tensor view = flat.slice(0, 1, t.numel() + 1).view(t.shape());
  view.copy_from(gpu(t));
  return view;
}

TEST(QuantGpu, Fp8RowsAndDequantizationBitIdenticalToCpu) {
  REQUIRE_GPU();
  const std::vector<Shape> shapes = {{37, 2880}, {5, 200}, {3, 7}, {1, 1}, {300, 128}};
  for (DType dt : {DType::f32, DType::bf16, DType::f16})
    for (const Shape& shape : shapes)
      for (bool aligned : {true, false}) {
        const std::string what = std::string("fp8 rows ") + std::string(dtype_name(dt)) +
                                 (aligned ? " [" : " misaligned [") + std::to_string(shape[0]) + ", " +
                                 std::to_string(shape[1]) + "]";
        const Tensor x = varied(shape, dt, 10 + shape[1]);
        const Quantized c = fp8_rows(x);
        Tensor values = poisoned(shape, DType::f8e4m3), scales = poisoned(c.scales.shape(), DType::f32);
        quantize_fp8_rows(aligned ? gpu(x) : misaligned_gpu(x), values, scales);
        expect_same_bytes(what + " values", values, c.values);
        expect_same_bytes(what + " scales", scales, c.scales);
        for (DType out : {DType::f32, DType::bf16}) {
          Tensor on_cpu = Tensor::empty(shape, out), on_gpu = poisoned(shape, out);
          dequantize_fp8_rows(c.values, c.scales, on_cpu);
          dequantize_fp8_rows(values, scales, on_gpu);
          expect_same_values(what + " dequantized to " + std::string(dtype_name(out)), on_gpu, on_cpu);
        }
      }
}

TEST(QuantGpu, Fp8BlocksOfStackedExpertsBitIdenticalToCpu) {
  REQUIRE_GPU();
  const std::vector<Shape> shapes = {{3, 300, 2880}, {2, 130, 200}, {5, 7}, {1, 129, 131}};
  for (DType dt : {DType::bf16, DType::f32})
    for (const Shape& shape : shapes) {
      const std::string what = std::string("fp8 blocks ") + std::string(dtype_name(dt)) + " " +
                               std::to_string(shape.numel()) + " elements";
      const Tensor w = varied(shape, dt, 20 + shape.numel());
      const Quantized c = fp8_blocks(w);
      Tensor values = poisoned(shape, DType::f8e4m3), scales = poisoned(c.scales.shape(), DType::f32);
      quantize_fp8_blocks(gpu(w), values, scales);
      expect_same_bytes(what + " values", values, c.values);
      expect_same_bytes(what + " scales", scales, c.scales);
      Tensor on_cpu = Tensor::empty(shape, DType::bf16), on_gpu = poisoned(shape, DType::bf16);
      dequantize_fp8_blocks(c.values, c.scales, on_cpu);
      dequantize_fp8_blocks(values, scales, on_gpu);
      expect_same_values(what + " dequantized", on_gpu, on_cpu);
    }
}

// Column-major scales, the column quantizer and the tiles' transposed codes on the GPU,
// against the CPU, over tails in both directions.
TEST(QuantGpu, Fp8ColumnsStridedScalesAndTransposedTilesBitIdenticalToCpu) {
  REQUIRE_GPU();
  for (const Shape& shape : std::vector<Shape>{{300, 200}, {129, 7}, {1, 1}, {2048, 1536}, {4096, 130}}) {
    const std::string what = concat("[", shape[0], ", ", shape[1], "]");
    const Tensor x = varied(shape, DType::bf16, 30 + shape[1]);
    const Shape flipped{shape[1], shape[0]};
    const Quantized rows = fp8_rows(x), columns = fp8_rows(x.transpose(0, 1).contiguous());
    Tensor values = poisoned(shape, DType::f8e4m3);
    Tensor storage = poisoned({rows.scales.size(1), shape[0]}, DType::f32);
    Tensor column_major = storage.transpose(0, 1);
    quantize_fp8_rows(gpu(x), values, column_major);
    expect_same_bytes(what + " rows, values", values, rows.values);
    expect_same_bytes(what + " rows, column-major scales", storage, rows.scales.transpose(0, 1).contiguous());
    Tensor t_values = poisoned(flipped, DType::f8e4m3), t_scales = poisoned(columns.scales.shape(), DType::f32);
    quantize_fp8_columns(gpu(x), t_values, t_scales);
    expect_same_bytes(what + " columns, values", t_values, columns.values);
    expect_same_bytes(what + " columns, scales", t_scales, columns.scales);
    const Quantized tiles = fp8_blocks(x);
    Tensor codes = poisoned(shape, DType::f8e4m3), tile_scales = poisoned(tiles.scales.shape(), DType::f32);
    Tensor transposed = poisoned(flipped, DType::f8e4m3);
    quantize_fp8_blocks(gpu(x), codes, tile_scales, &transposed);
    expect_same_bytes(what + " tiles, values", codes, tiles.values);
    expect_same_bytes(what + " tiles, scales", tile_scales, tiles.scales);
    expect_same_bytes(what + " tiles, transposed values", transposed, tiles.values.transpose(0, 1).contiguous());
  }
  // Stacked experts, their scales through the transposed view.
  const Tensor w = varied({3, 260, 136}, DType::bf16, 31);
  const Quantized tiles = fp8_blocks(w);
  Tensor codes = poisoned(w.shape(), DType::f8e4m3), transposed = poisoned({3, 136, 260}, DType::f8e4m3);
  Tensor t_scales = poisoned({3, 2, 3}, DType::f32), scales = t_scales.transpose(1, 2);
  quantize_fp8_blocks(gpu(w), codes, scales, &transposed);
  expect_same_bytes("stacked tiles, values", codes, tiles.values);
  expect_same_bytes("stacked tiles, transposed values", transposed, tiles.values.transpose(1, 2).contiguous());
  expect_same_bytes("stacked tiles, transposed scales", t_scales, tiles.scales.transpose(1, 2).contiguous());
}

TEST(QuantGpu, Mxfp4AndDequantizationBitIdenticalToCpu) {
  REQUIRE_GPU();
  const std::vector<Shape> shapes = {{3, 300, 2880}, {7, 64}, {1, 32}, {2, 5, 96}};
  for (DType dt : {DType::bf16, DType::f32, DType::f16})
    for (const Shape& shape : shapes)
      for (bool aligned : {true, false}) {
        const std::string what = std::string("mxfp4 ") + std::string(dtype_name(dt)) +
                                 (aligned ? " " : " misaligned ") + std::to_string(shape.numel()) + " elements";
        const Tensor w = varied(shape, dt, 30 + shape.numel());
        const Quantized c = mxfp4(w);
        Tensor values = poisoned(c.values.shape(), DType::u8), scales = poisoned(c.scales.shape(), DType::e8m0);
        quantize_mxfp4(aligned ? gpu(w) : misaligned_gpu(w), values, scales);
        expect_same_bytes(what + " values", values, c.values);
        expect_same_bytes(what + " scales", scales, c.scales);
        for (DType out : {DType::f32, DType::bf16}) {
          Tensor on_cpu = Tensor::empty(shape, out), on_gpu = poisoned(shape, out);
          dequantize_mxfp4(c.values, c.scales, on_cpu);
          dequantize_mxfp4(values, scales, on_gpu);
          expect_same_values(what + " dequantized to " + std::string(dtype_name(out)), on_gpu, on_cpu);
        }
      }
}

TEST(QuantGpu, Mxfp8AndDequantizationBitIdenticalToCpu) {
  REQUIRE_GPU();
  const std::vector<Shape> shapes = {{3, 300, 2880}, {7, 64}, {1, 32}, {2, 5, 96}};
  for (DType dt : {DType::bf16, DType::f32, DType::f16})
    for (const Shape& shape : shapes)
      for (bool aligned : {true, false}) {
        const std::string what = std::string("mxfp8 ") + std::string(dtype_name(dt)) +
                                 (aligned ? " " : " misaligned ") + std::to_string(shape.numel()) + " elements";
        const Tensor w = varied(shape, dt, 50 + shape.numel());
        const Quantized c = mxfp8(w);
        Tensor values = poisoned(shape, DType::f8e4m3), scales = poisoned(c.scales.shape(), DType::e8m0);
        quantize_mxfp8(aligned ? gpu(w) : misaligned_gpu(w), values, scales);
        expect_same_bytes(what + " values", values, c.values);
        expect_same_bytes(what + " scales", scales, c.scales);
        for (DType out : {DType::f32, DType::bf16}) {
          Tensor on_cpu = Tensor::empty(shape, out), on_gpu = poisoned(shape, out);
          dequantize_mxfp8(c.values, c.scales, on_cpu);
          dequantize_mxfp8(values, scales, on_gpu);
          expect_same_values(what + " dequantized to " + std::string(dtype_name(out)), on_gpu, on_cpu);
        }
      }
}

// Zeros, subnormal blocks, NaN and infinities in the five quantizers, from f32 and from
// bf16 (which also takes blocks whose scale is on either side of kReciprocalMinScale:
// those below divide, those above go through the reciprocal).
TEST(QuantGpu, SpecialBlocksBitIdenticalToCpu) {
  REQUIRE_GPU();
  Tensor f = varied({4, 512}, DType::f32, 40);
  float* p = f.data<float>();
  for (int i = 0; i < 128; ++i) p[i] = i % 2 ? 0.0f : -0.0f;            // a zero block
  for (int i = 128; i < 256; ++i) p[i] = static_cast<float>(i) * 0x1p-149f;  // subnormals
  p[300] = NAN;
  p[512 + 5] = INFINITY;
  p[1024 + 400] = -INFINITY;
  for (int i = 1536; i < 1568; ++i) p[i] = 0x1p-135f * static_cast<float>(i % 7);  // MXFP4 scale clamp
  for (int i = 1664; i < 1792; ++i) p[i] = 0x1p-75f * static_cast<float>(i % 5 - 2);
  for (int i = 1792; i < 1920; ++i) p[i] = 0x1p-69f * 0.37f * static_cast<float>(i % 9 - 4);
  for (DType dt : {DType::f32, DType::bf16}) {
    const Tensor x = f.to(dt);
    const std::string what = concat("special ", dtype_name(dt), " ");
    const Quantized rows = fp8_rows(x), blocks = fp8_blocks(x), fp4 = mxfp4(x), fp8 = mxfp8(x);
    const Quantized columns = fp8_rows(x.transpose(0, 1).contiguous());
    Tensor rv = poisoned(x.shape(), DType::f8e4m3), rs = poisoned(rows.scales.shape(), DType::f32);
    Tensor bv = poisoned(x.shape(), DType::f8e4m3), bs = poisoned(blocks.scales.shape(), DType::f32);
    Tensor mv = poisoned(fp4.values.shape(), DType::u8), ms = poisoned(fp4.scales.shape(), DType::e8m0);
    quantize_fp8_rows(gpu(x), rv, rs);
    quantize_fp8_blocks(gpu(x), bv, bs);
    quantize_mxfp4(gpu(x), mv, ms);
    Tensor ev = poisoned(x.shape(), DType::f8e4m3), es = poisoned(fp8.scales.shape(), DType::e8m0);
    quantize_mxfp8(gpu(x), ev, es);
    Tensor both_v = poisoned(x.shape(), DType::f8e4m3), both_s = poisoned(rows.scales.shape(), DType::f32);
    Tensor both_tv = poisoned(columns.values.shape(), DType::f8e4m3);
    Tensor both_ts = poisoned(columns.scales.shape(), DType::f32);
    quantize_fp8_rows_and_columns(gpu(x), both_v, both_s, both_tv, both_ts);
    const std::vector<std::tuple<std::string, const Tensor*, const Tensor*>> outputs = {
        {"fp8 rows values", &rv, &rows.values},
        {"fp8 rows scales", &rs, &rows.scales},
        {"fp8 blocks values", &bv, &blocks.values},
        {"fp8 blocks scales", &bs, &blocks.scales},
        {"mxfp4 values", &mv, &fp4.values},
        {"mxfp4 scales", &ms, &fp4.scales},
        {"mxfp8 values", &ev, &fp8.values},
        {"mxfp8 scales", &es, &fp8.scales},
        {"fp8 rows and columns, rows' values", &both_v, &rows.values},
        {"fp8 rows and columns, rows' scales", &both_s, &rows.scales},
        {"fp8 rows and columns, columns' values", &both_tv, &columns.values},
        {"fp8 rows and columns, columns' scales", &both_ts, &columns.scales}};
    for (const auto& [name, on_gpu, on_cpu] : outputs) expect_same_bytes(what + name, *on_gpu, *on_cpu);
  }
}

// The one-pass quantizer of both layouts against the CPU's rows and columns: tails in
// both directions, shapes that take the two-kernel path (a width not a multiple of
// four, f32, a misaligned source), and the column-major scales the dense FP8 product reads.
TEST(QuantGpu, Fp8RowsAndColumnsInOnePassBitIdenticalToCpu) {
  REQUIRE_GPU();
  const std::vector<Shape> shapes = {{300, 200}, {129, 7}, {1, 4}, {2048, 1536}, {4096, 132}, {16, 8192}};
  for (DType dt : {DType::bf16, DType::f16, DType::f32})
    for (const Shape& shape : shapes)
      for (bool aligned : {true, false}) {
        const std::string what =
            concat(dtype_name(dt), aligned ? " [" : " misaligned [", shape[0], ", ", shape[1], "]");
        const Tensor x = varied(shape, dt, 50 + shape[1]);
        const Shape flipped{shape[1], shape[0]};
        const Quantized rows = fp8_rows(x), columns = fp8_rows(x.transpose(0, 1).contiguous());
        Tensor values = poisoned(shape, DType::f8e4m3), t_values = poisoned(flipped, DType::f8e4m3);
        Tensor storage = poisoned({rows.scales.size(1), shape[0]}, DType::f32);
        Tensor t_storage = poisoned({columns.scales.size(1), shape[1]}, DType::f32);
        Tensor scales = storage.transpose(0, 1), t_scales = t_storage.transpose(0, 1);
        quantize_fp8_rows_and_columns(aligned ? gpu(x) : misaligned_gpu(x), values, scales, t_values, t_scales);
        expect_same_bytes(what + " rows, values", values, rows.values);
        expect_same_bytes(what + " rows, scales", storage, rows.scales.transpose(0, 1).contiguous());
        expect_same_bytes(what + " columns, values", t_values, columns.values);
        expect_same_bytes(what + " columns, scales", t_storage, columns.scales.transpose(0, 1).contiguous());
      }
}


// The GLU's backward quantized in one pass (ops/glu_linear.h), by rows and columns or
// by rows only (then with dgate_up), writes the bits of the GPU's GLU backward pass
// followed by the CPU's quantizers, rows off the
// 128-tiles (and not a multiple of 4, where the column codes leave as bytes), both
// GLUs, bf16 and f16; a width off 128 or an f32 source takes the two passes.
TEST(QuantGpu, GluBackwardInOnePassBitIdenticalToTheTwoPasses) {
  REQUIRE_GPU();
  struct Case {
    int64_t rows, width;
    DType dt;
  };
  for (const Case& c : {Case{300, 256, DType::bf16}, Case{129, 384, DType::f16}, Case{2048, 1024, DType::bf16},
                        Case{1, 128, DType::bf16}, Case{77, 200, DType::bf16}, Case{64, 128, DType::f32}}) {
    for (Glu glu : {Glu::swiglu, Glu::geglu}) {
      const std::string what = concat(glu == Glu::swiglu ? "swiglu " : "geglu ", dtype_name(c.dt), " [", c.rows, ", ",
                                      c.width, "]");
      const Tensor dh = gpu(varied({c.rows, c.width}, c.dt, 70 + c.rows));
      const Tensor gate_up = gpu(varied({c.rows, 2 * c.width}, c.dt, 71 + c.rows));
      const Shape shape{c.rows, 2 * c.width}, flipped{2 * c.width, c.rows};
      Tensor dgate_up = Tensor::empty(shape, c.dt, Device::cuda());
      glu_activation_backward(glu, dh, gate_up, dgate_up);
      const Tensor host = dgate_up.to(Device::cpu());
      const Quantized rows = fp8_rows(host), columns = fp8_rows(host.transpose(0, 1).contiguous());
      Tensor values = poisoned(shape, DType::f8e4m3), t_values = poisoned(flipped, DType::f8e4m3);
      Tensor scales = poisoned(rows.scales.shape(), DType::f32), t_scales = poisoned(columns.scales.shape(), DType::f32);
      Tensor scratch = gpu(Tensor::full(shape, NAN, c.dt));
      const bool one_pass = c.width % 128 == 0 && c.dt != DType::f32;
      EXPECT_EQ(glu_backward_fp8_rows_and_columns(glu, dh, gate_up, scratch, values, scales, t_values, t_scales),
                one_pass)
          << what;
      expect_same_bytes(what + " rows, values", values, rows.values);
      expect_same_bytes(what + " rows, scales", scales, rows.scales);
      expect_same_bytes(what + " columns, values", t_values, columns.values);
      expect_same_bytes(what + " columns, scales", t_scales, columns.scales);
      // Rows only, with dgate_up written, the scales through cuBLASLt's column-major view.
      Tensor rows_dgate_up = poisoned(shape, c.dt), rows_values = poisoned(shape, DType::f8e4m3);
      Tensor scale_columns = poisoned({rows.scales.size(1), c.rows}, DType::f32);
      Tensor rows_scales = scale_columns.transpose(0, 1);
      EXPECT_EQ(glu_backward_fp8_rows(glu, dh, gate_up, rows_dgate_up, rows_values, rows_scales), one_pass) << what;
      expect_same_bytes(what + " rows only, dgate_up", rows_dgate_up, host);
      expect_same_bytes(what + " rows only, values", rows_values, rows.values);
      expect_same_bytes(what + " rows only, scales", scale_columns.to(Device::cpu()).transpose(0, 1).contiguous(),
                        rows.scales);
    }
  }
}

}  // namespace
}  // namespace amber
