// The quantizers' element codes as the GPU computes them: e4m3 and e2m1 encoders,
// their decoders and the exponent of an MXFP4 scale, in integer and exact fp32
// operations only. Host-compilable, so tests/ops/quant_test.cpp pins every one against
// the core's conversions (core/dtype.h), which the CPU quantizers use.
#pragma once

#include <cmath>
#include <cstdint>

#include "amber/core/float_bits.h"

namespace amber::quant_codes {

// e4m3 (OCP "FN") with round-to-nearest-even; finite overflow and infinities
// saturate to +-448, NaN gives 0x7F, as f8e4m3_from_float.
AMBER_HD uint8_t e4m3_code(float x) {
  const uint32_t b = float_bits(x), sign = (b >> 24) & 0x80u, a = b & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7F;
  if (a > 0x43E00000u) return static_cast<uint8_t>(sign | 0x7E);  // above 448
  if (a < 0x3C800000u) {
    // Below 2^-6 (subnormal e4m3, and the step up to 2^-6) the quantum is 2^-9 and
    // the code is the count of quanta; |x| * 2^9 < 8 and its fraction are exact.
    const float scaled = bits_float(a) * 512.0f;
    const uint32_t whole = static_cast<uint32_t>(scaled);
    const float rest = scaled - static_cast<float>(whole);
    const uint32_t q = whole + ((rest > 0.5f || (rest == 0.5f && (whole & 1u))) ? 1u : 0u);
    return static_cast<uint8_t>(sign | q);
  }
  // Normal range: drop 20 of the 23 mantissa bits with ties to even; a carry into
  // the exponent is the correct next binade. Rebias 127 -> 7.
  const uint32_t rounded = (a + 0x7FFFFu + ((a >> 20) & 1u)) >> 20;
  return static_cast<uint8_t>(sign | (rounded - (120u << 3)));
}

AMBER_HD float e4m3_value(uint8_t code) {
  const uint32_t e = (code >> 3) & 0xFu, m = code & 7u;
  float v;
  if (e == 0xFu && m == 7u) {
    v = bits_float(0x7FC00000u);
  } else if (e == 0) {
    v = static_cast<float>(m) * 0x1p-9f;
  } else {
    v = bits_float(((e + 120u) << 23) | (m << 20));
  }
  return (code & 0x80u) ? -v : v;
}

// e2m1 with round-to-nearest-even and saturation to +-6: the code counts the
// decision points |x| passes; a tie (0.25, 0.75, ..., 5) goes to the even code, so
// the comparison is strict below an even code's upper midpoint. NaN gives 0.
AMBER_HD uint8_t e2m1_code(float x) {
  const uint32_t b = float_bits(x);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return 0;
  const float a = bits_float(b & 0x7FFFFFFFu);
  const uint32_t code = (a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) +
                        (a >= 3.5f) + (a > 5.0f);
  return static_cast<uint8_t>(((b >> 28) & 0x8u) | code);
}

AMBER_HD float e2m1_value(uint8_t code) {
  const uint32_t e = (code >> 1) & 3u, m = code & 1u;
  // e = 0: m * 0.5 (subnormal); else (2 + m) * 2^(e - 2), all exact in fp32.
  const float v = e == 0 ? 0.5f * static_cast<float>(m)
                         : static_cast<float>((2u + m) << e) * 0.25f;
  return (code & 0x8u) ? -v : v;
}

// floor(log2(a)) for a finite a > 0, subnormals included.
AMBER_HD int floor_log2(float a) {
  const uint32_t b = float_bits(a);
  const int e = static_cast<int>((b >> 23) & 0xFFu);
  if (e != 0) return e - 127;
  int top = 22;  // the subnormal's leading mantissa bit: value m * 2^-149
  while (((b >> top) & 1u) == 0) --top;
  return top - 149;
}

// x / scale from reciprocal = RN(1 / scale): q = RN(x * reciprocal), then one
// correction by the remainder x - q * scale, exact in an fma (Markstein's step), which
// the FP8 quantizers run per element in place of an IEEE division (one reciprocal per
// block). The result takes x's sign, as the quotient has it (a zero remainder added to
// q = -0 would give +0). For x and the block's amax both bf16 or both f16 (|x| <= amax,
// scale = RN(amax / 448)) with scale at least kReciprocalMinScale, e4m3_code of the
// result equals e4m3_code(x / scale):
// tests/ops/quant_test.cpp checks it over every 16-bit mantissa pair. Below that scale
// the remainder can be subnormal and inexact, so those blocks divide.
inline constexpr float kReciprocalMinScale = 0x1p-80f;

AMBER_HD float divide_by_reciprocal(float x, float scale, float reciprocal) {
#if defined(__CUDA_ARCH__)
  const float q = __fmul_rn(x, reciprocal), remainder = __fmaf_rn(-q, scale, x);
  return copysignf(__fmaf_rn(remainder, reciprocal, q), x);
#else
  const float q = x * reciprocal, remainder = std::fma(-q, scale, x);
  return std::copysign(std::fma(remainder, reciprocal, q), x);
#endif
}

// A block's FP8 scale RN(amax / 448) from a finite amax >= 0, as a product with the
// constant's reciprocal and divide_by_reciprocal's correction where the quotient is
// normal (amax >= kScaleByReciprocalMinAmax): there it equals the IEEE quotient for
// every fp32 amax (a scaling by 2^k changes neither the rounding nor the remainder's
// exactness, so the binades tests/ops/quant_test.cpp sweeps whole stand for all), and
// below it the quotient is subnormal and the division runs.
inline constexpr float kScaleByReciprocalMinAmax = 448.0f * 0x1p-126f;

AMBER_HD float fp8_scale_quotient(float amax) {
  constexpr float kInverse448 = 1.0f / 448.0f;  // RN(1 / 448)
#if defined(__CUDA_ARCH__)
  return amax >= kScaleByReciprocalMinAmax ? divide_by_reciprocal(amax, 448.0f, kInverse448) : __fdiv_rn(amax, 448.0f);
#else
  return amax >= kScaleByReciprocalMinAmax ? divide_by_reciprocal(amax, 448.0f, kInverse448) : amax / 448.0f;
#endif
}

// The largest exponents of the MX element formats (OCP MX v1.0).
inline constexpr int kE2m1Emax = 2, kE4m3Emax = 8;

// The e8m0 code of an MX block's scale X = 2^(floor(log2(amax)) - emax) (OCP MX v1.0;
// emax the element format's largest exponent), clamped to e8m0's smallest, 2^-127; a
// zero block gets that smallest too, and a block holding NaN or an infinity gets NaN
// (0xFF).
AMBER_HD uint8_t mx_scale_code(float amax, bool finite, int emax) {
  if (!finite) return 0xFF;
  if (amax == 0.0f) return 0;
  const int e = floor_log2(amax) - emax + 127;
  return static_cast<uint8_t>(e < 0 ? 0 : e);
}

// 2^(code - 127) for a code below 0xFF (code 0 is the subnormal 2^-127).
AMBER_HD float e8m0_value(uint8_t code) {
  return code == 0 ? bits_float(0x00400000u) : bits_float(static_cast<uint32_t>(code) << 23);
}

}  // namespace amber::quant_codes
