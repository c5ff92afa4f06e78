// Element-wise math that the CPU kernels' loops put in vector lanes. The C library's
// exp is a call the compiler cannot vectorise, so float gets an exp of our own; every
// lane runs the same IEEE operations in the same order (no FMA contraction: the build
// passes -ffp-contract=off), so a result is bit-identical at any vector width and on
// any x86 machine. Sums that must not depend on the width keep explicit running sums.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

// Hot kernels are compiled for AVX-512, AVX2 and the baseline, and the loader picks the
// widest the machine has (GCC's function multiversioning). clang 14, which builds the
// fuzz targets, cannot multiversion templates: there they run at the baseline width,
// with the same results.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define AMBER_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define AMBER_VECTOR_CLONES
#endif

namespace amber::cpu {

// A vector register's worth of T (64 bytes: one AVX-512 register, two AVX2 or four SSE
// registers; the compiler splits it to the width the clone targets). Kernels that
// must hold sums in registers across a loop use it directly, where the vectoriser
// would not; its arithmetic is lane-wise, the same IEEE operations as scalar code.
template <class T>
struct Lanes;
template <>
struct Lanes<float> {
  typedef float type __attribute__((vector_size(64)));
  static constexpr int64_t count = 16;
};
template <>
struct Lanes<double> {
  typedef double type __attribute__((vector_size(64)));
  static constexpr int64_t count = 8;
};

template <class T>
[[gnu::always_inline]] inline typename Lanes<T>::type load_lanes(const T* p) {
  typename Lanes<T>::type v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
template <class T>
[[gnu::always_inline]] inline void store_lanes(T* p, typename Lanes<T>::type v) {
  __builtin_memcpy(p, &v, sizeof v);
}

// exp(x) within 1.5 ulp of the exact value (a test sweeps the float range), subnormal
// results included; 0 below -104, +inf above log(FLT_MAX), NaN for NaN.
[[gnu::always_inline]] inline float exp_lanes(float x) {
  constexpr float kLow = -104.0f, kHigh = 88.75f, kOverflow = 88.72283935546875f;
  float xc = x < kLow ? kLow : x;  // comparisons, not fmin/fmax, so NaN passes through
  xc = xc > kHigh ? kHigh : xc;
  // x = n ln2 + r with |r| <= ln2 / 2. Adding and subtracting 1.5 * 2^23 rounds to the
  // nearest integer; ln 2 in two parts keeps n * ln2_hi exact.
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = (xc - n * 0.693145751953125f) - n * 1.428606820309417232e-6f;
  // exp(r): a degree-6 polynomial fitted to the relative error on [-ln2/2, ln2/2].
  float p = 0.0013829420786350965f;
  p = p * r + 0.008374771103262901f;
  p = p * r + 0.0416683591902256f;
  p = p * r + 0.1666642129421234f;
  p = p * r + 0.49999991059303284f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // 2^n as two normal powers of two (n reaches -150 for subnormal results, 128 near
  // overflow): the first product is exact, the second rounds once.
  const int32_t whole = static_cast<int32_t>(n == n ? n : 0.0f);
  const int32_t half = whole / 2;
  const float scaled = p * std::bit_cast<float>((half + 127) << 23) * std::bit_cast<float>((whole - half + 127) << 23);
  const float y = x < kLow ? 0.0f : scaled;
  return x > kOverflow ? std::numeric_limits<float>::infinity() : y;
}
inline double exp_lanes(double x) { return std::exp(x); }

// The sum of term(0), ..., term(n - 1) in a fixed order, independent of alignment and
// vector width: sixteen running sums (one per index mod 16, which vectorise) added
// pairwise.
template <class T, class Term>
[[gnu::always_inline]] inline T fixed_order_sum_of(int64_t n, Term term) {
  constexpr int64_t kLanes = 16;
  T lane[kLanes] = {};
  const int64_t whole = n - n % kLanes;
  for (int64_t i = 0; i < whole; i += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) lane[l] += term(i + l);
  for (int64_t i = whole; i < n; ++i) lane[i - whole] += term(i);
  for (int64_t width = kLanes / 2; width > 0; width /= 2)
    for (int64_t l = 0; l < width; ++l) lane[l] += lane[l + width];
  return lane[0];
}

template <class T>
[[gnu::always_inline]] inline T fixed_order_sum(const T* x, int64_t n) {
  return fixed_order_sum_of<T>(n, [x](int64_t i) { return x[i]; });
}

// The largest of x[0..n), n >= 1 (max is exact, so the lanes change nothing). The
// comparison is written on whole vectors: the compiler leaves std::max over an array of
// lanes as scalar code.
template <class T>
[[gnu::always_inline]] inline T max_of(const T* x, int64_t n) {
  using V = typename Lanes<T>::type;
  constexpr int64_t L = Lanes<T>::count;
  T m = x[0];
  const int64_t whole = n - n % L;
  if (whole > 0) {
    V lane = load_lanes(x);
    for (int64_t i = L; i < whole; i += L) {
      const V v = load_lanes(x + i);
      lane = lane < v ? v : lane;
    }
    for (int64_t l = 0; l < L; ++l) m = std::max(m, lane[l]);
  }
  for (int64_t i = whole; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

}  // namespace amber::cpu
