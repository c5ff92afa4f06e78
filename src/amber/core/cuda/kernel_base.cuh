// Device plumbing that every CUDA kernel shares, the core's (conversion, fill, random)
// and the ops': fp32 conversions for the three element types, the dtype switch, the
// launch check and the grid size of a grid-stride loop.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "amber/core/tensor.h"

namespace amber::cuda {

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }

template <class T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }

// Calls fn(T{}) with T the element type of a GPU float dtype (f32, bf16, f16).
template <class Fn>
void with_element_type(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::f32: fn(float{}); return;
    case DType::bf16: fn(__nv_bfloat16{}); return;
    case DType::f16: fn(__half{}); return;
    default:
      fail(op, ": CUDA kernels take f32, bf16 or f16 tensors, got ", dtype_name(dtype),
           "; run f64 (gradient checks) on the CPU");
  }
}

// Every launch is checked right away so a failure names the op and the shape.
inline void check_launch(const char* op, const Shape& shape) {
  const cudaError_t status = cudaGetLastError();
  AMBER_CHECK(status == cudaSuccess, op, ": CUDA kernel launch failed for shape ", shape, ": ",
              cudaGetErrorString(status));
}

// Blocks for a grid-stride loop over `work` items: enough to fill the GPU, no more.
inline unsigned grid_for(int64_t work, int threads) {
  const int64_t blocks = (work + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65536 ? 65536 : blocks));
}

}  // namespace amber::cuda
