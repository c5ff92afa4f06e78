// Philox fills on the GPU: the same stream as the CPU fill (core/philox.h), one
// thread per element, writing f32 (other dtypes are filled in f32 and converted).
#include <cuda_runtime.h>

#include "amber/core/philox.h"
#include "amber/core/random.h"
#include "amber/core/stream.h"

namespace amber::cuda {
namespace {

__global__ void uniform_kernel(float* out, int64_t n, uint64_t seed, uint64_t offset, float low,
                               float width) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = philox::fma_f(philox::to_uniform(philox::bits(seed, offset + i)), width, low);
}

__global__ void normal_kernel(float* out, int64_t n, uint64_t seed, uint64_t offset, float mean,
                              float std) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = philox::fma_f(philox::normal(seed, offset + i), std, mean);
}

template <class Launch>
void fill_as_f32(Tensor& t, Launch launch) {
  require_contiguous(t, "random fill");
  Tensor target = t.dtype() == DType::f32 ? t : Tensor::empty(t.shape(), DType::f32, t.device());
  const int64_t n = t.numel();
  if (n > 0) {
    const int threads = 256;
    launch(static_cast<float*>(target.raw()), n,
           static_cast<unsigned>((n + threads - 1) / threads), threads);
  }
  AMBER_CHECK(cudaGetLastError() == cudaSuccess, "random fill kernel launch failed");
  if (!target.shares_storage_with(t)) t.copy_from(target);
}

}  // namespace

void fill_uniform(Tensor& t, uint64_t seed, uint64_t offset, float low, float high) {
  fill_as_f32(t, [&](float* out, int64_t n, unsigned blocks, int threads) {
    uniform_kernel<<<blocks, threads, 0, current_stream()>>>(out, n, seed, offset, low, high - low);
  });
}

void fill_normal(Tensor& t, uint64_t seed, uint64_t offset, float mean, float std) {
  fill_as_f32(t, [&](float* out, int64_t n, unsigned blocks, int threads) {
    normal_kernel<<<blocks, threads, 0, current_stream()>>>(out, n, seed, offset, mean, std);
  });
}

}  // namespace amber::cuda
