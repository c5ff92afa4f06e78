// Philox4x32-10 counter-based random numbers, shared verbatim by host and device
// code so that (seed, index) gives the same bits on the CPU and on the GPU. The
// normal transform uses only operations that round identically on both sides
// (IEEE add/mul/div/sqrt and explicit fmaf), never the platform's libm, so normals
// are bit-identical too; tests/core/random_test.cpp pins both.
#pragma once

#include <cstdint>

#include "amber/core/float_bits.h"

#if !defined(__CUDACC__)
#include <cmath>
#endif

namespace amber::philox {

struct Block {
  uint32_t v[4];
};

AMBER_HD uint32_t mulhi(uint32_t a, uint32_t b) {
  return static_cast<uint32_t>((static_cast<uint64_t>(a) * b) >> 32);
}

// Philox4x32-10 of one 128-bit counter under a 64-bit key.
AMBER_HD Block philox4x32_10(Block ctr, uint32_t k0, uint32_t k1) {
  uint32_t c0 = ctr.v[0], c1 = ctr.v[1], c2 = ctr.v[2], c3 = ctr.v[3];
  for (int round = 0; round < 10; ++round) {
    const uint32_t hi0 = mulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    const uint32_t hi1 = mulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

// Block `block` of the stream keyed by `seed`.
AMBER_HD Block generate(uint64_t seed, uint64_t block) {
  return philox4x32_10({{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0u, 0u}},
                       static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// Element `index` of the stream: lane index%4 of block index/4.
AMBER_HD uint32_t bits(uint64_t seed, uint64_t index) {
  return generate(seed, index >> 2).v[index & 3];
}

// Uniform in [0, 1) with 24 random bits (exact in float).
AMBER_HD float to_uniform(uint32_t x) { return static_cast<float>(x >> 8) * 0x1p-24f; }
// Uniform in (0, 1], safe for log.
AMBER_HD float to_uniform_open0(uint32_t x) { return static_cast<float>((x >> 8) + 1) * 0x1p-24f; }

AMBER_HD float fma_f(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fmaf(a, b, c);
#endif
}
AMBER_HD float mul_f(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);  // never contracted into an fma
#else
  return a * b;
#endif
}


// Natural log of u in (0, 1]: exact exponent split, then the atanh series.
AMBER_HD float log_unit(float u) {
  uint32_t b = float_bits(u);
  int e = static_cast<int>((b >> 23) & 0xFF) - 127;
  b = (b & 0x007FFFFFu) | 0x3F800000u;
  float m = bits_float(b);  // in [1, 2)
  if (m > 1.41421356f) {
    m = mul_f(m, 0.5f);
    e += 1;
  }
  const float s = (m - 1.0f) / (m + 1.0f);
  const float z = mul_f(s, s);
  float p = 1.0f / 11.0f;
  p = fma_f(p, z, 1.0f / 9.0f);
  p = fma_f(p, z, 1.0f / 7.0f);
  p = fma_f(p, z, 1.0f / 5.0f);
  p = fma_f(p, z, 1.0f / 3.0f);
  p = fma_f(p, z, 1.0f);
  return fma_f(static_cast<float>(e), 0.693147182f, mul_f(mul_f(2.0f, s), p));
}

// sin and cos of 2*pi*u for u in [0, 1): octant reduction on u (exact), Taylor
// polynomials on [0, pi/4].
AMBER_HD void sincos_turn(float u, float* sin_out, float* cos_out) {
  const float t = mul_f(u, 8.0f);
  const int k = static_cast<int>(t);
  float f = t - static_cast<float>(k);
  if (k & 1) f = 1.0f - f;
  const float a = mul_f(f, 0.785398163f);
  const float a2 = mul_f(a, a);
  float ps = -1.0f / 39916800.0f;
  ps = fma_f(ps, a2, 1.0f / 362880.0f);
  ps = fma_f(ps, a2, -1.0f / 5040.0f);
  ps = fma_f(ps, a2, 1.0f / 120.0f);
  ps = fma_f(ps, a2, -1.0f / 6.0f);
  ps = fma_f(ps, a2, 1.0f);
  const float sa = mul_f(a, ps);
  float pc = 1.0f / 479001600.0f;
  pc = fma_f(pc, a2, -1.0f / 3628800.0f);
  pc = fma_f(pc, a2, 1.0f / 40320.0f);
  pc = fma_f(pc, a2, -1.0f / 720.0f);
  pc = fma_f(pc, a2, 1.0f / 24.0f);
  pc = fma_f(pc, a2, -0.5f);
  const float ca = fma_f(pc, a2, 1.0f);
  // (sin, cos) of the full angle from the octant: odd octants use the mirrored angle.
  const float s_tab[8] = {sa, ca, ca, sa, -sa, -ca, -ca, -sa};
  const float c_tab[8] = {ca, sa, -sa, -ca, -ca, -sa, sa, ca};
  *sin_out = s_tab[k & 7];
  *cos_out = c_tab[k & 7];
}

// Standard normal number `index` of the stream: Box-Muller on block index/4, which
// yields four normals (two pairs).
AMBER_HD float normal(uint64_t seed, uint64_t index) {
  const Block blk = generate(seed, index >> 2);
  const int pair = static_cast<int>((index >> 1) & 1);
  const float u1 = to_uniform_open0(blk.v[2 * pair]);
  const float u2 = to_uniform(blk.v[2 * pair + 1]);
  const float r = sqrtf(mul_f(-2.0f, log_unit(u1)));
  float s, c;
  sincos_turn(u2, &s, &c);
  return mul_f(r, (index & 1) ? s : c);
}

}  // namespace amber::philox
