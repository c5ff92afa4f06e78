// CPU residual-stream helpers: fp32 (fp64 for f64) math, narrow outputs rounded once.
#include "amber/ops/cpu/elementwise.h"

#include "amber/ops/cpu/dispatch.h"

namespace amber::cpu {

void add_scaled_into(Tensor& out, const Tensor& x, const Tensor& y, double alpha) {
  with_compute_type(out.dtype(), [&]<class T>() {
    const Tensor xw = widened<T>(x), yw = widened<T>(y);
    Output<T> o(out);
    T* p = o.data();
    const T* a = xw.data<T>();
    const T* b = yw.data<T>();
    const T scale = static_cast<T>(alpha);
    const int64_t n = out.numel();
#pragma omp parallel for if (n > 65536)
    for (int64_t i = 0; i < n; ++i) p[i] = a[i] + scale * b[i];
    o.store();
  });
}

void scale_into(Tensor& out, const Tensor& in, double alpha) {
  with_compute_type(out.dtype(), [&]<class T>() {
    const Tensor iw = widened<T>(in);
    Output<T> o(out);
    T* p = o.data();
    const T* q = iw.data<T>();
    const T a = static_cast<T>(alpha);
    const int64_t n = out.numel();
#pragma omp parallel for if (n > 65536)
    for (int64_t i = 0; i < n; ++i) p[i] = a * q[i];
    o.store();
  });
}

void fill_from_scalar(Tensor& out, const Tensor& scalar) { out.fill(scalar.item(0)); }

void zero_all(std::span<Tensor> tensors) {
  for (Tensor& t : tensors) t.zero();
}

}  // namespace amber::cpu
