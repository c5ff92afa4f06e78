// Device-side dtype conversion behind Tensor::copy_from: f32, bf16 and f16 in any
// pair, rounding to nearest even (the refresh of bf16 working copies after every
// optimizer step goes through here); and Tensor::fill, as a bit pattern per element.
#include <cstring>

#include "amber/core/cuda_runtime.h"
#include "amber/ops/cuda/common.cuh"

namespace amber::cuda {
namespace {

template <class Out, class In>
__global__ void convert_kernel(Out* out, const In* in, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = from_f32<Out>(to_f32(in[i]));
}

template <class Bits>
__global__ void fill_kernel(Bits* out, Bits value, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = value;
}

template <class Bits>
void launch_fill(void* dst, const void* element, size_t n) {
  Bits value;
  std::memcpy(&value, element, sizeof(Bits));
  const int threads = 256;
  fill_kernel<Bits><<<grid_for(static_cast<int64_t>(n), threads), threads, 0, cudaStreamPerThread>>>(
      static_cast<Bits*>(dst), value, static_cast<int64_t>(n));
}

bool is_gpu_float(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; }

}  // namespace

bool convert(void* dst, DType dst_type, const void* src, DType src_type, size_t n) {
  if (!is_gpu_float(dst_type) || !is_gpu_float(src_type)) return false;
  if (n == 0) return true;
  const char* op = "convert";
  with_element_type(dst_type, op, [&](auto out_tag) {
    using Out = decltype(out_tag);
    with_element_type(src_type, op, [&](auto in_tag) {
      using In = decltype(in_tag);
      const int threads = 256;
      convert_kernel<Out, In><<<grid_for(static_cast<int64_t>(n), threads), threads, 0, cudaStreamPerThread>>>(
          static_cast<Out*>(dst), static_cast<const In*>(src), static_cast<int64_t>(n));
    });
  });
  check_launch(op, Shape{static_cast<int64_t>(n)});
  return true;
}

void fill(void* dst, size_t element_bytes, const void* element, size_t n) {
  if (n == 0) return;
  switch (element_bytes) {
    case 1: launch_fill<uint8_t>(dst, element, n); break;
    case 2: launch_fill<uint16_t>(dst, element, n); break;
    case 4: launch_fill<uint32_t>(dst, element, n); break;
    case 8: launch_fill<uint64_t>(dst, element, n); break;
    default: fail("fill: elements of ", element_bytes, " bytes are not supported on the GPU");
  }
  check_launch("fill", Shape{static_cast<int64_t>(n)});
}

}  // namespace amber::cuda
