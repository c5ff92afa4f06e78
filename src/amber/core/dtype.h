// Element types and their exact conversions. Every narrowing conversion rounds to
// nearest, ties to even; the rules for overflow and special values are in
// docs/numerics.md and pinned by tests/core/dtype_test.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace amber {

// u8 is raw bytes read as unsigned integers: packed MXFP4 pairs (ops/quant.h).
enum class DType : uint8_t { f64, f32, bf16, f16, f8e4m3, f8e5m2, e8m0, i32, i64, u16, u8 };

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);
DType dtype_from_name(std::string_view name);  // throws Error listing valid names
bool is_floating(DType t);

// Scalar conversions. `*_from_float` take a float and return the encoded bits.
uint16_t bf16_from_float(float x);
float bf16_to_float(uint16_t bits);
uint16_t f16_from_float(float x);
float f16_to_float(uint16_t bits);
// e4m3 (OCP "FN": no infinities, NaN = S.1111.111): finite values and infinities
// saturate to +-448, NaN stays NaN.
uint8_t f8e4m3_from_float(float x);
float f8e4m3_to_float(uint8_t bits);
// e5m2 (IEEE-like): overflow rounds to infinity exactly as a narrower f16 would.
uint8_t f8e5m2_from_float(float x);
float f8e5m2_to_float(uint8_t bits);
// e8m0: an unsigned power of two 2^(bits-127); 0xFF is NaN. Non-positive, NaN and
// infinite inputs give NaN; the midpoint between two powers ties to the even code.
uint8_t e8m0_from_float(float x);
float e8m0_to_float(uint8_t bits);
// e2m1 (OCP MX FP4, a 4-bit code in the low nibble; no DType of its own: two codes
// share a u8): values 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives. No infinity or
// NaN: overflow and infinities saturate to +-6; NaN encodes as +0 (MXFP4 marks a
// block holding NaN in its scale).
uint8_t e2m1_from_float(float x);
float e2m1_to_float(uint8_t code);

// Converts `n` contiguous elements between any two dtypes (floats round as above,
// integers convert through double and truncate toward zero).
void convert(const void* src, DType src_type, void* dst, DType dst_type, size_t n);

// Converts one element read as double (used by the few element-wise helpers that
// need generic access; hot paths use typed pointers).
double load_as_double(const void* base, DType t, size_t index);
void store_from_double(void* base, DType t, size_t index, double value);

}  // namespace amber
