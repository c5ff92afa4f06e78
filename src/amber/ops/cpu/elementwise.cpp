#include "amber/ops/elementwise.h"

#include "amber/ops/cpu/dispatch.h"

namespace amber {

void add_scaled(Tensor& x, const Tensor& y, double alpha) {
  cpu::require_cpu(x, "add_scaled");
  require_same_shape(x, y, "add_scaled");
  cpu::with_compute_type(x.dtype(), [&]<class T>() {
    const Tensor yw = cpu::widened<T>(y);
    cpu::Output<T> out(x, true);
    T* p = out.data();
    const T* q = yw.data<T>();
    const T a = static_cast<T>(alpha);
    const int64_t n = x.numel();
#pragma omp parallel for if (n > 65536)
    for (int64_t i = 0; i < n; ++i) p[i] += a * q[i];
    out.store();
  });
}

void scale_into(Tensor& out, const Tensor& in, double alpha) {
  cpu::require_cpu(out, "scale_into");
  require_same_shape(out, in, "scale_into");
  cpu::with_compute_type(out.dtype(), [&]<class T>() {
    const Tensor iw = cpu::widened<T>(in);
    cpu::Output<T> o(out);
    T* p = o.data();
    const T* q = iw.data<T>();
    const T a = static_cast<T>(alpha);
    const int64_t n = out.numel();
#pragma omp parallel for if (n > 65536)
    for (int64_t i = 0; i < n; ++i) p[i] = a * q[i];
    o.store();
  });
}

}  // namespace amber
