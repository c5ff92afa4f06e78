#include "amber/core/random.h"

#include "amber/core/philox.h"

namespace amber {
namespace {

template <class Gen>
void fill_cpu(Tensor& t, Gen gen) {
  require_contiguous(t, "random fill");
  void* base = t.raw();
  const DType dt = t.dtype();
  AMBER_CHECK(is_floating(dt), "random fill needs a floating tensor, got ", dtype_name(dt));
  const int64_t n = t.numel();
  if (dt == DType::f32) {
    float* p = static_cast<float*>(base);
#pragma omp parallel for if (n > 65536)
    for (int64_t i = 0; i < n; ++i) p[i] = gen(static_cast<uint64_t>(i));
    return;
  }
#pragma omp parallel for if (n > 65536)
  for (int64_t i = 0; i < n; ++i)
    store_from_double(base, dt, static_cast<size_t>(i), gen(static_cast<uint64_t>(i)));
}

}  // namespace

void fill_uniform(Tensor& t, uint64_t seed, uint64_t offset, float low, float high) {
  if (t.device().is_cuda()) return cuda::fill_uniform(t, seed, offset, low, high);
  const float width = high - low;
  fill_cpu(t, [&](uint64_t i) {
    return philox::fma_f(philox::to_uniform(philox::bits(seed, offset + i)), width, low);
  });
}

void fill_normal(Tensor& t, uint64_t seed, uint64_t offset, float mean, float std) {
  if (t.device().is_cuda()) return cuda::fill_normal(t, seed, offset, mean, std);
  fill_cpu(t, [&](uint64_t i) { return philox::fma_f(philox::normal(seed, offset + i), std, mean); });
}

#ifndef AMBER_WITH_CUDA
void cuda::fill_uniform(Tensor&, uint64_t, uint64_t, float, float) {
  fail("fill_uniform on a CUDA tensor, but this amber was built without CUDA");
}
void cuda::fill_normal(Tensor&, uint64_t, uint64_t, float, float) {
  fail("fill_normal on a CUDA tensor, but this amber was built without CUDA");
}
#endif

}  // namespace amber
