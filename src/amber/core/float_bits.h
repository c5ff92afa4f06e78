// A float's 32-bit pattern and back, in host and device code alike: the bit-exact
// arithmetic of the Philox normals (core/philox.h) and of the quantizers' element codes
// (ops/cuda/quant/quant_codes.h) is written on these.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define AMBER_HD __host__ __device__ __forceinline__
#else
#define AMBER_HD inline
#endif

namespace amber {

AMBER_HD uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t b;
  __builtin_memcpy(&b, &x, 4);
  return b;
#endif
}

AMBER_HD float bits_float(uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  float x;
  __builtin_memcpy(&x, &b, 4);
  return x;
#endif
}

}  // namespace amber
