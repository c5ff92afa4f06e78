// CUDA activations: one kernel per form over groups of V consecutive elements of a row
// (V = 16 bytes of T when the width and alignment allow, else 1): the GLUs by rows and
// groups of a row, plain GELU grid-stride over one row.
#include <initializer_list>

#include "amber/core/stream.h"
#include "amber/ops/cuda/activation/activation.h"
#include "amber/ops/cuda/activation/glu_math.cuh"
#include "amber/ops/cuda/common/common.cuh"

namespace amber::cuda {
namespace {

struct GeluErf {
  __device__ static float value(float x) { return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f)); }
  __device__ static float derivative(float x) {
    const float cdf = 0.5f * (1.0f + erff(x * 0.7071067811865476f));
    return cdf + x * expf(-0.5f * x * x) * 0.3989422804014327f;
  }
};

template <class T, int V>
__device__ __forceinline__ Vec<T, V> load(const T* p) {
  return *reinterpret_cast<const Vec<T, V>*>(p);
}
template <class T, int V>
__device__ __forceinline__ void store(T* p, const Vec<T, V>& v) {
  *reinterpret_cast<Vec<T, V>*>(p) = v;
}

// The GLU kernels' threads: block (x, y) takes the V-element groups x * blockDim.x +
// threadIdx.x of rows y, y + gridDim.y, ... (no division per group).
template <int V>
__device__ __forceinline__ int64_t glu_column() {
  return (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V;
}

// h[r, c] = act(gate_up[r, c]) * gate_up[r, width + c]
template <class Act, class T, int V>
__global__ void glu_forward_kernel(const T* gate_up, T* h, int64_t rows, int64_t width) {
  const int64_t c = glu_column<V>();
  if (c >= width) return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const Vec<T, V> g = load<T, V>(gate_up + r * 2 * width + c);
    const Vec<T, V> u = load<T, V>(gate_up + r * 2 * width + width + c);
    Vec<T, V> o;
#pragma unroll
    for (int e = 0; e < V; ++e) o.v[e] = from_f32<T>(Act::value(to_f32(g.v[e])) * to_f32(u.v[e]));
    store<T, V>(h + r * width + c, o);
  }
}

template <class Act, class T, int V>
__global__ void glu_backward_kernel(const T* dh, const T* gate_up, T* dgate_up, int64_t rows,
                                    int64_t width) {
  const int64_t c = glu_column<V>();
  if (c >= width) return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const Vec<T, V> g = load<T, V>(gate_up + r * 2 * width + c);
    const Vec<T, V> u = load<T, V>(gate_up + r * 2 * width + width + c);
    const Vec<T, V> d = load<T, V>(dh + r * width + c);
    Vec<T, V> dg, du;
#pragma unroll
    for (int e = 0; e < V; ++e) {
      float dgate, dvalue;
      glu_backward_pair<Act>(to_f32(g.v[e]), to_f32(u.v[e]), to_f32(d.v[e]), dgate, dvalue);
      dg.v[e] = from_f32<T>(dgate);
      du.v[e] = from_f32<T>(dvalue);
    }
    store<T, V>(dgate_up + r * 2 * width + c, dg);
    store<T, V>(dgate_up + r * 2 * width + width + c, du);
  }
}

// Plain GELU viewed as one row of n elements.
template <class T, int V>
__global__ void gelu_forward_kernel(const T* x, T* y, int64_t n) {
  const int64_t items = n / V, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < items; i += stride) {
    const Vec<T, V> a = load<T, V>(x + i * V);
    Vec<T, V> o;
#pragma unroll
    for (int e = 0; e < V; ++e) o.v[e] = from_f32<T>(GeluErf::value(to_f32(a.v[e])));
    store<T, V>(y + i * V, o);
  }
}

template <class T, int V>
__global__ void gelu_backward_kernel(const T* dy, const T* x, T* dx, int64_t n) {
  const int64_t items = n / V, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < items; i += stride) {
    const Vec<T, V> a = load<T, V>(x + i * V), g = load<T, V>(dy + i * V);
    Vec<T, V> o;
#pragma unroll
    for (int e = 0; e < V; ++e) o.v[e] = from_f32<T>(to_f32(g.v[e]) * GeluErf::derivative(to_f32(a.v[e])));
    store<T, V>(dx + i * V, o);
  }
}

// Checks the tensors share a dtype and are contiguous, then calls launch(T{}, packed)
// where `packed` says 16-byte groups fit every row (width % 16 bytes == 0) and pointer.
template <class Launch>
void launch_typed(const char* op, std::initializer_list<const Tensor*> tensors, int64_t width,
                  const Shape& shape, Launch&& launch) {
  const Tensor& first = **tensors.begin();
  bool aligned = true;
  for (const Tensor* t : tensors) {
    require_contiguous(*t, op);
    AMBER_CHECK(t->dtype() == first.dtype(), op, ": on the GPU all tensors need one dtype, got ",
                dtype_name(first.dtype()), " and ", dtype_name(t->dtype()));
    aligned = aligned && aligned16(t->raw());
  }
  with_element_type(first.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    launch(tag, aligned && width % Pack<T>::n == 0);
  });
  check_launch(op, shape);
}

constexpr int kThreads = 256;

// glu_column's grid: the row's groups across x, rows across y (at most 65535 a launch;
// more rows loop).
dim3 glu_grid(int64_t rows, int64_t width, int v) {
  const int64_t groups = width / v;
  return dim3(static_cast<unsigned>((groups + kThreads - 1) / kThreads),
              static_cast<unsigned>(rows < 65535 ? rows : 65535));
}

template <class Act>
void glu_forward(const Tensor& gate_up, Tensor& h, const char* op) {
  const int64_t rows = h.size(0), width = h.size(1);
  if (rows * width == 0) return;
  launch_typed(op, {&gate_up, &h}, width, gate_up.shape(), [&](auto tag, bool packed) {
    using T = decltype(tag);
    constexpr int N = Pack<T>::n;
    const T* in = static_cast<const T*>(gate_up.raw());
    T* out = static_cast<T*>(h.raw());
    if (packed)
      glu_forward_kernel<Act, T, N>
          <<<glu_grid(rows, width, N), kThreads, 0, current_stream()>>>(in, out, rows, width);
    else
      glu_forward_kernel<Act, T, 1>
          <<<glu_grid(rows, width, 1), kThreads, 0, current_stream()>>>(in, out, rows, width);
  });
}

template <class Act>
void glu_backward(const Tensor& dh, const Tensor& gate_up, Tensor& dgate_up, const char* op) {
  const int64_t rows = dh.size(0), width = dh.size(1);
  if (rows * width == 0) return;
  launch_typed(op, {&dh, &gate_up, &dgate_up}, width, gate_up.shape(), [&](auto tag, bool packed) {
    using T = decltype(tag);
    constexpr int N = Pack<T>::n;
    const T* g = static_cast<const T*>(dh.raw());
    const T* in = static_cast<const T*>(gate_up.raw());
    T* out = static_cast<T*>(dgate_up.raw());
    if (packed)
      glu_backward_kernel<Act, T, N>
          <<<glu_grid(rows, width, N), kThreads, 0, current_stream()>>>(g, in, out, rows, width);
    else
      glu_backward_kernel<Act, T, 1>
          <<<glu_grid(rows, width, 1), kThreads, 0, current_stream()>>>(g, in, out, rows, width);
  });
}

}  // namespace

void swiglu_forward(const Tensor& gate_up, Tensor& h) { glu_forward<Silu>(gate_up, h, "swiglu_forward"); }
void swiglu_backward(const Tensor& dh, const Tensor& gate_up, Tensor& dgate_up) {
  glu_backward<Silu>(dh, gate_up, dgate_up, "swiglu_backward");
}
void geglu_forward(const Tensor& gate_up, Tensor& h) {
  glu_forward<GeluTanh>(gate_up, h, "geglu_forward");
}
void geglu_backward(const Tensor& dh, const Tensor& gate_up, Tensor& dgate_up) {
  glu_backward<GeluTanh>(dh, gate_up, dgate_up, "geglu_backward");
}

void gelu_forward(const Tensor& x, Tensor& y) {
  const int64_t n = x.numel();
  if (n == 0) return;
  // A flat array: packs need n itself to be a multiple of the pack width.
  launch_typed("gelu_forward", {&x, &y}, n, x.shape(), [&](auto tag, bool packed) {
    using T = decltype(tag);
    constexpr int N = Pack<T>::n;
    const T* in = static_cast<const T*>(x.raw());
    T* out = static_cast<T*>(y.raw());
    if (packed)
      gelu_forward_kernel<T, N><<<grid_for(n / N, kThreads), kThreads, 0, current_stream()>>>(in, out, n);
    else
      gelu_forward_kernel<T, 1><<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(in, out, n);
  });
}

void gelu_backward(const Tensor& dy, const Tensor& x, Tensor& dx) {
  const int64_t n = x.numel();
  if (n == 0) return;
  launch_typed("gelu_backward", {&dy, &x, &dx}, n, x.shape(), [&](auto tag, bool packed) {
    using T = decltype(tag);
    constexpr int N = Pack<T>::n;
    const T* g = static_cast<const T*>(dy.raw());
    const T* in = static_cast<const T*>(x.raw());
    T* out = static_cast<T*>(dx.raw());
    if (packed)
      gelu_backward_kernel<T, N><<<grid_for(n / N, kThreads), kThreads, 0, current_stream()>>>(g, in, out, n);
    else
      gelu_backward_kernel<T, 1><<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(g, in, out, n);
  });
}

}  // namespace amber::cuda
