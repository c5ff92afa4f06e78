// CPU activations: one element-wise template per form, with its exact derivative.
#include "amber/ops/activation.h"

#include <cmath>

#include "amber/ops/cpu/dispatch.h"

namespace amber {
namespace {

struct Silu {
  template <class T> static T value(T x) { return x / (T(1) + std::exp(-x)); }
  template <class T> static T derivative(T x) {
    const T s = T(1) / (T(1) + std::exp(-x));
    return s * (T(1) + x * (T(1) - s));
  }
};

struct GeluTanh {
  static constexpr double kC = 0.7978845608028654;  // sqrt(2/pi)
  template <class T> static T value(T x) {
    const T u = T(kC) * (x + T(0.044715) * x * x * x);
    return T(0.5) * x * (T(1) + std::tanh(u));
  }
  template <class T> static T derivative(T x) {
    const T u = T(kC) * (x + T(0.044715) * x * x * x);
    const T th = std::tanh(u);
    const T du = T(kC) * (T(1) + T(3 * 0.044715) * x * x);
    return T(0.5) * (T(1) + th) + T(0.5) * x * (T(1) - th * th) * du;
  }
};

struct GeluErf {
  template <class T> static T value(T x) { return T(0.5) * x * (T(1) + std::erf(x * T(M_SQRT1_2))); }
  template <class T> static T derivative(T x) {
    const T cdf = T(0.5) * (T(1) + std::erf(x * T(M_SQRT1_2)));
    const T pdf = std::exp(T(-0.5) * x * x) * T(0.3989422804014327);
    return cdf + x * pdf;
  }
};

int64_t glu_width(const Tensor& gate_up, const Tensor& h, const char* op) {
  cpu::require_cpu(gate_up, op);
  AMBER_CHECK(gate_up.ndim() == 2 && gate_up.size(1) % 2 == 0, op, ": gate_up ", gate_up.shape(),
              " must be [N, 2H]");
  AMBER_CHECK(h.ndim() == 2 && h.size(0) == gate_up.size(0) && h.size(1) * 2 == gate_up.size(1), op,
              ": h ", h.shape(), " does not match gate_up ", gate_up.shape());
  return h.size(1);
}

template <class Act>
void glu_forward(const Tensor& gate_up, Tensor& h, const char* op) {
  const int64_t width = glu_width(gate_up, h, op), rows = h.size(0);
  cpu::with_compute_type(gate_up.dtype(), [&]<class T>() {
    const Tensor in = cpu::widened<T>(gate_up);
    cpu::Output<T> out(h);
    const T* p = in.data<T>();
    T* o = out.data();
#pragma omp parallel for if (rows * width > 65536)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < width; ++j)
        o[r * width + j] = Act::value(p[r * 2 * width + j]) * p[r * 2 * width + width + j];
    out.store();
  });
}

template <class Act>
void glu_backward(const Tensor& dh, const Tensor& gate_up, Tensor& dgate_up, const char* op) {
  const int64_t width = glu_width(gate_up, dh, op), rows = dh.size(0);
  require_same_shape(gate_up, dgate_up, op);
  cpu::with_compute_type(gate_up.dtype(), [&]<class T>() {
    const Tensor in = cpu::widened<T>(gate_up), g = cpu::widened<T>(dh);
    cpu::Output<T> out(dgate_up);
    const T *p = in.data<T>(), *pg = g.data<T>();
    T* o = out.data();
#pragma omp parallel for if (rows * width > 65536)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < width; ++j) {
        const T gate = p[r * 2 * width + j], value = p[r * 2 * width + width + j];
        const T grad = pg[r * width + j];
        o[r * 2 * width + j] = grad * value * Act::derivative(gate);
        o[r * 2 * width + width + j] = grad * Act::value(gate);
      }
    out.store();
  });
}

}  // namespace

void swiglu_forward(const Tensor& gate_up, Tensor& h) { glu_forward<Silu>(gate_up, h, "swiglu_forward"); }
void swiglu_backward(const Tensor& dh, const Tensor& gate_up, Tensor& dgate_up) {
  glu_backward<Silu>(dh, gate_up, dgate_up, "swiglu_backward");
}
void geglu_forward(const Tensor& gate_up, Tensor& h) { glu_forward<GeluTanh>(gate_up, h, "geglu_forward"); }
void geglu_backward(const Tensor& dh, const Tensor& gate_up, Tensor& dgate_up) {
  glu_backward<GeluTanh>(dh, gate_up, dgate_up, "geglu_backward");
}

void gelu_forward(const Tensor& x, Tensor& y) {
  cpu::require_cpu(x, "gelu_forward");
  require_same_shape(x, y, "gelu_forward");
  cpu::with_compute_type(x.dtype(), [&]<class T>() {
    const Tensor in = cpu::widened<T>(x);
    cpu::Output<T> out(y);
    const T* p = in.data<T>();
    T* o = out.data();
    const int64_t n = x.numel();
#pragma omp parallel for if (n > 65536)
    for (int64_t i = 0; i < n; ++i) o[i] = GeluErf::value(p[i]);
    out.store();
  });
}

void gelu_backward(const Tensor& dy, const Tensor& x, Tensor& dx) {
  cpu::require_cpu(x, "gelu_backward");
  require_same_shape(x, dy, "gelu_backward");
  cpu::with_compute_type(x.dtype(), [&]<class T>() {
    const Tensor in = cpu::widened<T>(x), g = cpu::widened<T>(dy);
    cpu::Output<T> out(dx);
    const T *p = in.data<T>(), *pg = g.data<T>();
    T* o = out.data();
    const int64_t n = x.numel();
#pragma omp parallel for if (n > 65536)
    for (int64_t i = 0; i < n; ++i) o[i] = pg[i] * GeluErf::derivative(p[i]);
    out.store();
  });
}

}  // namespace amber
