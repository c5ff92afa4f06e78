// Exact element conversions. The narrow float formats share one encoder that scales
// the input to an integer mantissa in double arithmetic (exact for every float) and
// rounds with nearbyint in the default round-to-nearest-even mode.
#include "amber/core/dtype.h"

#include <array>
#include <bit>
#include <cmath>
#include <cstring>

#include "amber/core/error.h"

namespace amber {
namespace {

struct FloatFormat {
  int exponent_bits;
  int mantissa_bits;
  bool has_infinity;  // IEEE style: all-ones exponent is inf/NaN
  // Formats without infinity: the largest finite magnitude and the NaN code.
  double max_finite;
  uint32_t nan_code;
  bool has_nan = true;  // false: NaN encodes as nan_code, which is an ordinary value
};

constexpr FloatFormat kF16{5, 10, true, 65504.0, 0x7E00};
constexpr FloatFormat kE5M2{5, 2, true, 57344.0, 0x7E};
constexpr FloatFormat kE4M3{4, 3, false, 448.0, 0x7F};
constexpr FloatFormat kE2M1{2, 1, false, 6.0, 0x0, false};

uint32_t encode(const FloatFormat& f, float value) {
  const uint32_t sign = std::signbit(value) ? 1u : 0u;
  const uint32_t sign_bit = sign << (f.exponent_bits + f.mantissa_bits);
  const int bias = (1 << (f.exponent_bits - 1)) - 1;
  const uint32_t exp_all_ones = (1u << f.exponent_bits) - 1;
  if (std::isnan(value)) return f.nan_code;
  double a = std::fabs(static_cast<double>(value));
  if (std::isinf(value)) {
    if (f.has_infinity) return sign_bit | (exp_all_ones << f.mantissa_bits);
    a = f.max_finite;  // saturating format
  }
  if (a == 0.0) return sign_bit;
  int e = std::ilogb(a);
  const int min_normal_exp = 1 - bias;
  if (e < min_normal_exp) e = min_normal_exp;  // subnormal range shares the quantum
  const double quantum = std::ldexp(1.0, e - f.mantissa_bits);
  double q = std::nearbyint(a / quantum);  // exact division by a power of two
  double rounded = q * quantum;
  if (rounded > f.max_finite) {
    if (f.has_infinity) return sign_bit | (exp_all_ones << f.mantissa_bits);
    rounded = f.max_finite;
  }
  if (rounded == 0.0) return sign_bit;
  int re = std::ilogb(rounded);
  uint32_t exp_field, man_field;
  if (re < min_normal_exp) {
    exp_field = 0;
    man_field = static_cast<uint32_t>(rounded / std::ldexp(1.0, min_normal_exp - f.mantissa_bits));
  } else {
    exp_field = static_cast<uint32_t>(re + bias);
    man_field = static_cast<uint32_t>(rounded / std::ldexp(1.0, re - f.mantissa_bits)) -
                (1u << f.mantissa_bits);
  }
  return sign_bit | (exp_field << f.mantissa_bits) | man_field;
}

float decode(const FloatFormat& f, uint32_t bits) {
  const int bias = (1 << (f.exponent_bits - 1)) - 1;
  const uint32_t exp_all_ones = (1u << f.exponent_bits) - 1;
  const uint32_t man_mask = (1u << f.mantissa_bits) - 1;
  const bool negative = (bits >> (f.exponent_bits + f.mantissa_bits)) & 1u;
  const uint32_t exp_field = (bits >> f.mantissa_bits) & exp_all_ones;
  const uint32_t man_field = bits & man_mask;
  double v;
  if (f.has_infinity && exp_field == exp_all_ones) {
    v = man_field ? NAN : INFINITY;
  } else if (f.has_nan && !f.has_infinity && exp_field == exp_all_ones && man_field == man_mask) {
    v = NAN;
  } else if (exp_field == 0) {
    v = std::ldexp(static_cast<double>(man_field), 1 - bias - f.mantissa_bits);
  } else {
    v = std::ldexp(static_cast<double>(man_field | (1u << f.mantissa_bits)),
                   static_cast<int>(exp_field) - bias - f.mantissa_bits);
  }
  return static_cast<float>(negative ? -v : v);
}

}  // namespace

uint16_t bf16_from_float(float x) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  if (std::isnan(x)) return static_cast<uint16_t>((u >> 16) | 0x0040);  // keep quiet NaN
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float bf16_to_float(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

uint16_t f16_from_float(float x) { return static_cast<uint16_t>(encode(kF16, x)); }
float f16_to_float(uint16_t bits) { return decode(kF16, bits); }
uint8_t f8e4m3_from_float(float x) { return static_cast<uint8_t>(encode(kE4M3, x)); }
float f8e4m3_to_float(uint8_t bits) { return decode(kE4M3, bits); }
uint8_t f8e5m2_from_float(float x) { return static_cast<uint8_t>(encode(kE5M2, x)); }
float f8e5m2_to_float(uint8_t bits) { return decode(kE5M2, bits); }

uint8_t e2m1_from_float(float x) { return static_cast<uint8_t>(encode(kE2M1, x)); }
float e2m1_to_float(uint8_t code) { return decode(kE2M1, code & 0xFu); }

uint8_t e8m0_from_float(float x) {
  if (!(x > 0.0f) || std::isinf(x)) return 0xFF;
  const double a = x;
  int e = std::ilogb(a);  // 2^e <= a < 2^(e+1)
  const double frac = a / std::ldexp(1.0, e);  // in [1, 2)
  if (frac > 1.5 || (frac == 1.5 && ((e + 127) & 1))) e += 1;  // nearest; ties to even code
  if (e < -127) return 0x00;
  if (e > 127) return 0xFF;
  return static_cast<uint8_t>(e + 127);
}
float e8m0_to_float(uint8_t bits) {
  if (bits == 0xFF) return NAN;
  return static_cast<float>(std::ldexp(1.0, static_cast<int>(bits) - 127));
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f64: case DType::i64: return 8;
    case DType::f32: case DType::i32: return 4;
    case DType::bf16: case DType::f16: case DType::u16: return 2;
    case DType::f8e4m3: case DType::f8e5m2: case DType::e8m0: case DType::u8: return 1;
  }
  return 0;
}

namespace {
constexpr std::array<std::string_view, 11> kNames = {
    "f64", "f32", "bf16", "f16", "f8e4m3", "f8e5m2", "e8m0", "i32", "i64", "u16", "u8"};
}

std::string_view dtype_name(DType t) { return kNames[static_cast<size_t>(t)]; }

DType dtype_from_name(std::string_view name) {
  for (size_t i = 0; i < kNames.size(); ++i)
    if (kNames[i] == name) return static_cast<DType>(i);
  fail("unknown dtype '", name, "'; valid dtypes: f64 f32 bf16 f16 f8e4m3 f8e5m2 e8m0 i32 i64 u16 u8");
}

bool is_floating(DType t) {
  return t != DType::i32 && t != DType::i64 && t != DType::u16 && t != DType::u8;
}

double load_as_double(const void* base, DType t, size_t i) {
  switch (t) {
    case DType::f64: return static_cast<const double*>(base)[i];
    case DType::f32: return static_cast<const float*>(base)[i];
    case DType::bf16: return bf16_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::f16: return f16_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::f8e4m3: return f8e4m3_to_float(static_cast<const uint8_t*>(base)[i]);
    case DType::f8e5m2: return f8e5m2_to_float(static_cast<const uint8_t*>(base)[i]);
    case DType::e8m0: return e8m0_to_float(static_cast<const uint8_t*>(base)[i]);
    case DType::i32: return static_cast<const int32_t*>(base)[i];
    case DType::i64: return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case DType::u16: return static_cast<const uint16_t*>(base)[i];
    case DType::u8: return static_cast<const uint8_t*>(base)[i];
  }
  return 0.0;
}

void store_from_double(void* base, DType t, size_t i, double v) {
  // Narrow floats go through float first: double->float rounds to nearest even, and
  // the float->narrow step cannot create a double rounding because float carries
  // more than twice the mantissa bits of every narrow format plus two.
  switch (t) {
    case DType::f64: static_cast<double*>(base)[i] = v; break;
    case DType::f32: static_cast<float*>(base)[i] = static_cast<float>(v); break;
    case DType::bf16: static_cast<uint16_t*>(base)[i] = bf16_from_float(static_cast<float>(v)); break;
    case DType::f16: static_cast<uint16_t*>(base)[i] = f16_from_float(static_cast<float>(v)); break;
    case DType::f8e4m3: static_cast<uint8_t*>(base)[i] = f8e4m3_from_float(static_cast<float>(v)); break;
    case DType::f8e5m2: static_cast<uint8_t*>(base)[i] = f8e5m2_from_float(static_cast<float>(v)); break;
    case DType::e8m0: static_cast<uint8_t*>(base)[i] = e8m0_from_float(static_cast<float>(v)); break;
    case DType::i32: static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v); break;
    case DType::i64: static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v); break;
    case DType::u16: static_cast<uint16_t*>(base)[i] = static_cast<uint16_t>(v); break;
    case DType::u8: static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(v); break;
  }
}

void convert(const void* src, DType st, void* dst, DType dt, size_t n) {
  if (n == 0) return;  // an empty tensor may have no storage: no pointer to pass on
  if (st == dt) {
    std::memcpy(dst, src, n * dtype_size(st));
    return;
  }
  if (st == DType::f32 && dt == DType::bf16) {
    const float* s = static_cast<const float*>(src);
    uint16_t* d = static_cast<uint16_t*>(dst);
#pragma omp parallel for if (n > (1u << 16))
    for (size_t i = 0; i < n; ++i) d[i] = bf16_from_float(s[i]);
    return;
  }
  if (st == DType::bf16 && dt == DType::f32) {
    const uint16_t* s = static_cast<const uint16_t*>(src);
    float* d = static_cast<float*>(dst);
#pragma omp parallel for if (n > (1u << 16))
    for (size_t i = 0; i < n; ++i) d[i] = bf16_to_float(s[i]);
    return;
  }
#pragma omp parallel for if (n > (1u << 16))
  for (size_t i = 0; i < n; ++i) store_from_double(dst, dt, i, load_as_double(src, st, i));
}

}  // namespace amber
