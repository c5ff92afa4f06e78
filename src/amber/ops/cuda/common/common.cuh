// Shared device plumbing of the CUDA ops: 16-byte packs, block reductions, occupancy and
// deterministic column sums, on top of the core's conversions and launch helpers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "amber/core/cuda/kernel_base.cuh"
#include "amber/core/stream.h"
#include "amber/core/tensor.h"

namespace amber::cuda {

// 16 bytes of T: the widest access one thread makes in the memory-bound kernels.
template <class T>
struct alignas(16) Pack {
  static constexpr int n = 16 / sizeof(T);
  T v[n];
};

// V consecutive elements of T in one access, widened to (or rounded from) fp32.
template <class T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

template <class T, int V>
__device__ __forceinline__ void load_f32(const T* p, float (&out)[V]) {
  const Vec<T, V> a = *reinterpret_cast<const Vec<T, V>*>(p);
#pragma unroll
  for (int e = 0; e < V; ++e) out[e] = to_f32(a.v[e]);
}

template <class T, int V>
__device__ __forceinline__ void store_f32(T* p, const float (&in)[V]) {
  Vec<T, V> a;
#pragma unroll
  for (int e = 0; e < V; ++e) a.v[e] = from_f32<T>(in[e]);
  *reinterpret_cast<Vec<T, V>*>(p) = a;
}

__host__ __device__ inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The table entry owning chunk `chunk`, for tables whose entry i owns the chunks
// first_chunk[i] .. first_chunk[i + 1] - 1 (count entries).
__device__ __forceinline__ int table_entry(const int64_t* first_chunk, int count, int64_t chunk) {
  int i = 0;
  while (i + 1 < count && first_chunk[i + 1] <= chunk) ++i;
  return i;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024), returned to every
// thread. `scratch` holds 32 floats; the trailing barrier lets callers reuse it.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = lane < warps ? scratch[lane] : 0.0f;
  total = warp_sum(total);
  __syncthreads();
  return total;
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float m = lane < warps ? scratch[lane] : -INFINITY;
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  __syncthreads();
  return m;
}

// Raises a kernel's dynamic shared-memory limit (a host-side attribute, no sync); set
// on every call because the attribute is per device.
inline void allow_smem(const void* kernel, size_t bytes, const char* op) {
  AMBER_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   static_cast<int>(bytes)) == cudaSuccess,
              op, ": cannot raise the shared-memory limit to ", bytes, " bytes");
}

// Multiprocessors of the current device, read once per device (inline: one cache
// shared by every file).
inline int sm_count() {
  static int counts[64] = {};
  int device = 0;
  cudaGetDevice(&device);
  if (counts[device] == 0) {
    int n = 0;
    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device);
    counts[device] = n > 0 ? n : 1;
  }
  return counts[device];
}

// Blocks of `kernel` resident on the device at once (at least one an SM): the size of a
// one-wave grid, which depends on the kernel, its launch shape and the device only.
template <class Kernel>
int64_t resident_blocks(Kernel kernel, int threads, size_t smem) {
  int per_sm = 0;
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem);
  return (per_sm > 1 ? per_sm : 1) * static_cast<int64_t>(sm_count());
}

// The compute capability's major version of CUDA device `device`, read once per device
// (one process may drive cards of different generations).
inline int compute_major(int device) {
  static int majors[64] = {};
  if (majors[device] == 0) {
    int major = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    majors[device] = major > 0 ? major : -1;
  }
  return majors[device];
}

// out[j] += sum over b of partial[b, j]: the second, fixed-order half of every
// deterministic parameter-gradient reduction. A block takes 32 columns of one group of
// rows; warp w adds the group's rows w, w + 16, ... in order and the 16 warps' sums meet
// in warp order. Many rows are summed in two launches: first each group of
// kRowsPerGroup rows into a row of a scratch [groups, d], then those rows; one block per
// 32 columns walking every row was bound by the latency of its loads (a [2048, 64]
// partial kept two SMs busy for about 15 us). The grouping depends on the shape only, so
// the bits do too.
constexpr int kColumnSumWarps = 16;
constexpr int64_t kRowsPerGroup = 64;
// kAdd: out[j] += the group's sum; otherwise out[group * d + j] = it.
template <class P, bool kAdd>
__global__ void __launch_bounds__(32 * kColumnSumWarps) column_sums_kernel(const float* partial, int64_t rows,
                                                                           int64_t d, P* out) {
  __shared__ float sums[kColumnSumWarps][32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * 32 + lane;
  const int64_t first = kAdd ? 0 : blockIdx.y * kRowsPerGroup;
  const int64_t last = kAdd ? rows : (first + kRowsPerGroup < rows ? first + kRowsPerGroup : rows);
  float s = 0.0f;
  if (j < d)
    for (int64_t b = first + warp; b < last; b += kColumnSumWarps) s += partial[b * d + j];
  sums[warp][lane] = s;
  __syncthreads();
  if (warp != 0 || j >= d) return;
  float total = kAdd ? to_f32(out[j]) : 0.0f;
  for (int w = 0; w < kColumnSumWarps; ++w) total += sums[w][lane];
  out[(kAdd ? 0 : blockIdx.y * d) + j] = from_f32<P>(total);
}

// grad (any GPU float dtype, d elements) += the column sums of partial [blocks, d] (f32).
inline void add_column_sums(const Tensor& partial, Tensor& grad, const char* op) {
  const int64_t rows = partial.size(0), d = partial.size(1);
  require_contiguous(grad, op);
  AMBER_CHECK(grad.numel() == d, op, ": gradient ", grad.shape(), " does not match ", d, " columns");
  const unsigned column_blocks = static_cast<unsigned>((d + 31) / 32);
  const float* sums = static_cast<const float*>(partial.raw());
  int64_t sum_rows = rows;
  Tensor grouped;
  if (rows > 2 * kRowsPerGroup) {
    sum_rows = (rows + kRowsPerGroup - 1) / kRowsPerGroup;
    grouped = Tensor::empty({sum_rows, d}, DType::f32, partial.device());
    column_sums_kernel<float, false><<<dim3(column_blocks, static_cast<unsigned>(sum_rows)), 32 * kColumnSumWarps,
                                       0, current_stream()>>>(sums, rows, d, static_cast<float*>(grouped.raw()));
    sums = static_cast<const float*>(grouped.raw());
  }
  with_element_type(grad.dtype(), op, [&](auto tag) {
    using P = decltype(tag);
    column_sums_kernel<P, true><<<column_blocks, 32 * kColumnSumWarps, 0, current_stream()>>>(
        sums, sum_rows, d, static_cast<P*>(grad.raw()));
  });
  check_launch(op, grad.shape());
}

}  // namespace amber::cuda
