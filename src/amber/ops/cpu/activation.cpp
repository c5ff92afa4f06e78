// CPU activations: one element-wise template per form, with its exact derivative.
#include "amber/ops/cpu/activation.h"

#include <cmath>

#include "amber/ops/cpu/dispatch.h"
#include "amber/ops/cpu/vector_math.h"

namespace amber::cpu {
namespace {

// SiLU's exp is ops/cpu/vector_math.h's, so its loops run in vector lanes.
struct Silu {
  template <class T> static T value(T x) { return x / (T(1) + exp_lanes(-x)); }
  template <class T> static T derivative(T x) {
    const T s = T(1) / (T(1) + exp_lanes(-x));
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

// h = act(gate) * up over rows of [gate | up].
template <class Act, class T>
AMBER_VECTOR_CLONES void glu_forward_rows(const T* p, T* o, int64_t rows, int64_t width) {
#pragma omp parallel for if (rows * width > 65536)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < width; ++j) o[r * width + j] = Act::value(p[r * 2 * width + j]) * p[r * 2 * width + width + j];
}

template <class Act, class T>
AMBER_VECTOR_CLONES void glu_backward_rows(const T* pg, const T* p, T* o, int64_t rows, int64_t width) {
#pragma omp parallel for if (rows * width > 65536)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < width; ++j) {
      const T gate = p[r * 2 * width + j], value = p[r * 2 * width + width + j];
      const T grad = pg[r * width + j];
      o[r * 2 * width + j] = grad * value * Act::derivative(gate);
      o[r * 2 * width + width + j] = grad * Act::value(gate);
    }
}

template <class Act>
void glu_forward(const Tensor& gate_up, Tensor& h) {
  const int64_t width = h.size(1), rows = h.size(0);
  with_compute_type(gate_up.dtype(), [&]<class T>() {
    const Tensor in = widened<T>(gate_up);
    Output<T> out(h);
    glu_forward_rows<Act>(in.data<T>(), out.data(), rows, width);
    out.store();
  });
}

template <class Act>
void glu_backward(const Tensor& dh, const Tensor& gate_up, Tensor& dgate_up) {
  const int64_t width = dh.size(1), rows = dh.size(0);
  with_compute_type(gate_up.dtype(), [&]<class T>() {
    const Tensor in = widened<T>(gate_up), g = widened<T>(dh);
    Output<T> out(dgate_up);
    glu_backward_rows<Act>(g.data<T>(), in.data<T>(), out.data(), rows, width);
    out.store();
  });
}

}  // namespace

void swiglu_forward(const Tensor& gate_up, Tensor& h) { glu_forward<Silu>(gate_up, h); }
void swiglu_backward(const Tensor& dh, const Tensor& gate_up, Tensor& dgate_up) {
  glu_backward<Silu>(dh, gate_up, dgate_up);
}
void geglu_forward(const Tensor& gate_up, Tensor& h) { glu_forward<GeluTanh>(gate_up, h); }
void geglu_backward(const Tensor& dh, const Tensor& gate_up, Tensor& dgate_up) {
  glu_backward<GeluTanh>(dh, gate_up, dgate_up);
}

void gelu_forward(const Tensor& x, Tensor& y) {
  with_compute_type(x.dtype(), [&]<class T>() {
    const Tensor in = widened<T>(x);
    Output<T> out(y);
    const T* p = in.data<T>();
    T* o = out.data();
    const int64_t n = x.numel();
#pragma omp parallel for if (n > 65536)
    for (int64_t i = 0; i < n; ++i) o[i] = GeluErf::value(p[i]);
    out.store();
  });
}

void gelu_backward(const Tensor& dy, const Tensor& x, Tensor& dx) {
  with_compute_type(x.dtype(), [&]<class T>() {
    const Tensor in = widened<T>(x), g = widened<T>(dy);
    Output<T> out(dx);
    const T *p = in.data<T>(), *pg = g.data<T>();
    T* o = out.data();
    const int64_t n = x.numel();
#pragma omp parallel for if (n > 65536)
    for (int64_t i = 0; i < n; ++i) o[i] = pg[i] * GeluErf::derivative(p[i]);
    out.store();
  });
}

}  // namespace amber::cpu
