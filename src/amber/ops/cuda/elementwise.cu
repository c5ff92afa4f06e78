// CUDA residual-stream helpers: one grid-stride map kernel, 16-byte packs when every
// pointer is aligned, a scalar tail for the remainder.
#include "amber/ops/cuda/common.cuh"
#include "amber/ops/cuda/elementwise.h"

namespace amber::cuda {
namespace {

// out[i] = alpha * in[i] + (accumulate ? out[i] : 0)
template <class T>
__global__ void axpby_kernel(T* out, const T* in, float alpha, bool accumulate, int64_t n,
                             bool packed) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t tail = 0;
  if (packed) {
    constexpr int N = Pack<T>::n;
    const int64_t packs = n / N;
    for (int64_t p = tid; p < packs; p += stride) {
      const Pack<T> a = reinterpret_cast<const Pack<T>*>(in)[p];
      Pack<T> o;
      if (accumulate) o = reinterpret_cast<const Pack<T>*>(out)[p];
#pragma unroll
      for (int e = 0; e < N; ++e)
        o.v[e] = from_f32<T>((accumulate ? to_f32(o.v[e]) : 0.0f) + alpha * to_f32(a.v[e]));
      reinterpret_cast<Pack<T>*>(out)[p] = o;
    }
    tail = packs * N;
  }
  for (int64_t i = tail + tid; i < n; i += stride)
    out[i] = from_f32<T>((accumulate ? to_f32(out[i]) : 0.0f) + alpha * to_f32(in[i]));
}

void axpby(Tensor& out, const Tensor& in, double alpha, bool accumulate, const char* op) {
  require_contiguous(out, op);
  require_contiguous(in, op);
  AMBER_CHECK(out.dtype() == in.dtype(), op, ": on the GPU both tensors need one dtype, got ",
              dtype_name(out.dtype()), " and ", dtype_name(in.dtype()));
  const int64_t n = out.numel();
  if (n == 0) return;
  with_element_type(out.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out.raw());
    const T* i = static_cast<const T*>(in.raw());
    const bool packed = aligned16(o) && aligned16(i);
    const int threads = 256;
    axpby_kernel<T><<<grid_for(packed ? n / Pack<T>::n + 1 : n, threads), threads, 0,
                      cudaStreamPerThread>>>(o, i, static_cast<float>(alpha), accumulate, n, packed);
  });
  check_launch(op, out.shape());
}

}  // namespace

void add_scaled(Tensor& x, const Tensor& y, double alpha) { axpby(x, y, alpha, true, "add_scaled"); }

void scale_into(Tensor& out, const Tensor& in, double alpha) {
  axpby(out, in, alpha, false, "scale_into");
}

template <class T>
__global__ void fill_from_scalar_kernel(T* out, int64_t n, const double* scalar) {
  const T value = from_f32<T>(static_cast<float>(*scalar));
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = value;
}

void fill_from_scalar(Tensor& out, const Tensor& scalar) {
  const char* op = "fill_from_scalar";
  const int64_t n = out.numel();
  if (n == 0) return;
  with_element_type(out.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    fill_from_scalar_kernel<T><<<grid_for(n, 256), 256, 0, cudaStreamPerThread>>>(
        static_cast<T*>(out.raw()), n, static_cast<const double*>(scalar.raw()));
  });
  check_launch(op, out.shape());
}

}  // namespace amber::cuda
