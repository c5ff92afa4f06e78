// CUDA RMSNorm and LayerNorm: one block per row with fp32 statistics; the backward
// runs a fixed grid whose blocks own fixed row ranges and keep per-column partial
// weight gradients in shared memory, summed afterwards in block order, so dweight
// and dbias are bit-identical from run to run (no float atomics).
#include <initializer_list>
#include <utility>

#include "amber/ops/cuda/common.cuh"
#include "amber/ops/cuda/norm.h"

namespace amber::cuda {
namespace {

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

// Loads V weights, or ones when there is no affine weight.
template <class T, int V>
__device__ __forceinline__ void load_weight(const T* w, int64_t j, float (&out)[V]) {
  if (w) {
    load_f32<T, V>(w + j, out);
  } else {
#pragma unroll
    for (int e = 0; e < V; ++e) out[e] = 1.0f;
  }
}

template <class T, int V>
__device__ __forceinline__ void store_f32(T* p, const float (&in)[V]) {
  Vec<T, V> a;
#pragma unroll
  for (int e = 0; e < V; ++e) a.v[e] = from_f32<T>(in[e]);
  *reinterpret_cast<Vec<T, V>*>(p) = a;
}

// mean == nullptr: RMSNorm (no centring). bias may be null.
template <class T, int V>
__global__ void norm_forward_kernel(const T* x, const T* w, const T* bias, float eps, T* y,
                                    float* mean, float* rstd, int64_t d) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x, groups = d / V;
  const T* xr = x + row * d;
  T* yr = y + row * d;
  float mu = 0.0f;
  if (mean) {
    float s = 0.0f;
    for (int64_t p = threadIdx.x; p < groups; p += blockDim.x) {
      float a[V];
      load_f32<T, V>(xr + p * V, a);
#pragma unroll
      for (int e = 0; e < V; ++e) s += a[e];
    }
    mu = block_sum(s, scratch) / static_cast<float>(d);
  }
  float ss = 0.0f;  // two-pass variance for LayerNorm: no cancellation at large means
  for (int64_t p = threadIdx.x; p < groups; p += blockDim.x) {
    float a[V];
    load_f32<T, V>(xr + p * V, a);
#pragma unroll
    for (int e = 0; e < V; ++e) ss += (a[e] - mu) * (a[e] - mu);
  }
  ss = block_sum(ss, scratch);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(d) + eps);
  if (threadIdx.x == 0) {
    rstd[row] = inv;
    if (mean) mean[row] = mu;
  }
  for (int64_t p = threadIdx.x; p < groups; p += blockDim.x) {
    float a[V], g[V], b[V];
    load_f32<T, V>(xr + p * V, a);
    load_weight<T, V>(w, p * V, g);
    if (bias) {
      load_f32<T, V>(bias + p * V, b);
    } else {
#pragma unroll
      for (int e = 0; e < V; ++e) b[e] = 0.0f;
    }
#pragma unroll
    for (int e = 0; e < V; ++e) a[e] = (a[e] - mu) * inv * g[e] + b[e];
    store_f32<T, V>(yr + p * V, a);
  }
}

// Rows [blockIdx.x * rows_per_block, ...) of one block. dx overwritten; when
// dw_partial is set, block b writes sum over its rows of dy * xhat into
// dw_partial[b, :] (and of dy into db_partial[b, :] when set). mean == nullptr: RMSNorm.
template <class T, int V>
__global__ void norm_backward_kernel(const T* dy, const T* x, const T* w, const float* mean,
                                     const float* rstd, T* dx, float* dw_partial, float* db_partial,
                                     int64_t rows, int64_t rows_per_block, int64_t d) {
  extern __shared__ float acc[];  // [d] for dw, then [d] for db
  __shared__ float scratch[32];
  float* acc_w = acc;
  float* acc_b = acc + (dw_partial ? d : 0);
  const int64_t groups = d / V;
  // Each thread only ever touches its own columns of acc, so no barrier is needed
  // between rows for it.
  for (int64_t p = threadIdx.x; p < groups; p += blockDim.x)
#pragma unroll
    for (int e = 0; e < V; ++e) {
      if (dw_partial) acc_w[p * V + e] = 0.0f;
      if (db_partial) acc_b[p * V + e] = 0.0f;
    }
  const int64_t first = blockIdx.x * rows_per_block;
  const int64_t last = first + rows_per_block < rows ? first + rows_per_block : rows;
  const float inv_d = 1.0f / static_cast<float>(d);
  for (int64_t row = first; row < last; ++row) {
    const T *xr = x + row * d, *gr = dy + row * d;
    const float mu = mean ? mean[row] : 0.0f, inv = rstd[row];
    // xhat = (x - mu) inv, gw = dy * w: dx = inv (gw - mean(gw) - xhat mean(gw xhat));
    // RMSNorm drops the mean(gw) term.
    float sum_g = 0.0f, sum_gx = 0.0f;
    for (int64_t p = threadIdx.x; p < groups; p += blockDim.x) {
      float a[V], g[V], ww[V];
      load_f32<T, V>(xr + p * V, a);
      load_f32<T, V>(gr + p * V, g);
      load_weight<T, V>(w, p * V, ww);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const float gw = g[e] * ww[e];
        sum_g += gw;
        sum_gx += gw * (a[e] - mu) * inv;
      }
    }
    sum_gx = block_sum(sum_gx, scratch);
    const float mg = mean ? block_sum(sum_g, scratch) * inv_d : 0.0f;
    const float mgx = sum_gx * inv_d;
    for (int64_t p = threadIdx.x; p < groups; p += blockDim.x) {
      float a[V], g[V], ww[V], o[V];
      load_f32<T, V>(xr + p * V, a);
      load_f32<T, V>(gr + p * V, g);
      load_weight<T, V>(w, p * V, ww);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const float xhat = (a[e] - mu) * inv;
        o[e] = inv * (g[e] * ww[e] - mg - xhat * mgx);
        if (dw_partial) acc_w[p * V + e] += g[e] * xhat;
        if (db_partial) acc_b[p * V + e] += g[e];
      }
      store_f32<T, V>(dx + row * d + p * V, o);
    }
  }
  for (int64_t p = threadIdx.x; p < groups; p += blockDim.x)
#pragma unroll
    for (int e = 0; e < V; ++e) {
      if (dw_partial) dw_partial[blockIdx.x * d + p * V + e] = acc_w[p * V + e];
      if (db_partial) db_partial[blockIdx.x * d + p * V + e] = acc_b[p * V + e];
    }
}

int threads_for(int64_t groups) {
  int threads = 32;
  while (threads < groups && threads < 512) threads *= 2;
  return threads;
}

void require_activation(const Tensor& t, const Tensor& x, const char* what, const char* op) {
  if (!t.defined()) return;
  require_contiguous(t, op);
  AMBER_CHECK(t.dtype() == x.dtype(), op, ": ", what, " is ", dtype_name(t.dtype()), " but the input is ",
              dtype_name(x.dtype()), "; on the GPU they must match");
}

void require_stat(const Tensor& t, const char* what, const char* op) {
  require_contiguous(t, op);
  AMBER_CHECK(t.dtype() == DType::f32, op, ": ", what, " must be f32 on the GPU, got ",
              dtype_name(t.dtype()));
}

// The shape of one norm call, after its tensors were validated for the GPU.
struct NormCall {
  const char* op;
  int64_t rows, d;
};

NormCall prepare(const char* op, const Tensor& x, std::initializer_list<std::pair<const Tensor*, const char*>> same,
                 std::initializer_list<std::pair<const Tensor*, const char*>> stats) {
  require_contiguous(x, op);
  for (const auto& [t, what] : same) require_activation(*t, x, what, op);
  for (const auto& [t, what] : stats)
    if (t->defined()) require_stat(*t, what, op);
  const int64_t d = x.size(-1);
  return {op, d > 0 ? x.numel() / d : 0, d};
}

template <class T>
const T* ptr(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.raw()) : nullptr;
}

bool all_aligned(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    if (t->defined() && !aligned16(t->raw())) return false;
  return true;
}

void norm_forward(const NormCall& c, const Tensor& x, const Tensor& weight, const Tensor& bias,
                  double eps, Tensor& y, Tensor& mean, Tensor& rstd) {
  if (c.rows == 0) return;
  with_element_type(x.dtype(), c.op, [&](auto tag) {
    using T = decltype(tag);
    constexpr int N = Pack<T>::n;
    const bool packed = c.d % N == 0 && all_aligned({&x, &weight, &bias, &y});
    float* pm = mean.defined() ? static_cast<float*>(mean.raw()) : nullptr;
    float* pr = static_cast<float*>(rstd.raw());
    T* py = static_cast<T*>(y.raw());
    if (packed)
      norm_forward_kernel<T, N><<<static_cast<unsigned>(c.rows), threads_for(c.d / N), 0,
                                  cudaStreamPerThread>>>(ptr<T>(x), ptr<T>(weight), ptr<T>(bias),
                                                         static_cast<float>(eps), py, pm, pr, c.d);
    else
      norm_forward_kernel<T, 1><<<static_cast<unsigned>(c.rows), threads_for(c.d), 0,
                                  cudaStreamPerThread>>>(ptr<T>(x), ptr<T>(weight), ptr<T>(bias),
                                                         static_cast<float>(eps), py, pm, pr, c.d);
  });
  check_launch(c.op, x.shape());
}

void norm_backward(const NormCall& c, const Tensor& dy, const Tensor& x, const Tensor& weight,
                   const Tensor& mean, const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias) {
  if (c.rows == 0) return;
  const bool want_dw = weight.defined() && dweight.defined(), want_db = dbias.defined();
  // A fixed grid (it depends on the shape and the device only) keeps the partial
  // sums, and so the gradient bits, the same on every run.
  const int64_t target = 2 * static_cast<int64_t>(sm_count());
  const int64_t rows_per_block = (c.rows + target - 1) / target;
  const int64_t blocks = (c.rows + rows_per_block - 1) / rows_per_block;
  Tensor dw_partial = want_dw ? Tensor::empty({blocks, c.d}, DType::f32, x.device()) : Tensor();
  Tensor db_partial = want_db ? Tensor::empty({blocks, c.d}, DType::f32, x.device()) : Tensor();
  const size_t smem = static_cast<size_t>(c.d) * sizeof(float) * ((want_dw ? 1 : 0) + (want_db ? 1 : 0));
  with_element_type(x.dtype(), c.op, [&](auto tag) {
    using T = decltype(tag);
    constexpr int N = Pack<T>::n;
    const bool packed = c.d % N == 0 && all_aligned({&dy, &x, &weight, &dx});
    auto kernel = packed ? norm_backward_kernel<T, N> : norm_backward_kernel<T, 1>;
    if (smem + 32 * sizeof(float) > 48 * 1024) {  // the static scratch counts too
      int device = 0, limit = 0;
      cudaGetDevice(&device);
      cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
      AMBER_CHECK(smem + 32 * sizeof(float) <= static_cast<size_t>(limit), c.op, ": rows of ", c.d,
                  " columns need ", smem, " bytes of shared memory for the weight gradients; the GPU "
                  "allows ", limit);
      AMBER_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)) == cudaSuccess,
                  c.op, ": cannot raise the shared-memory limit to ", smem, " bytes");
    }
    kernel<<<static_cast<unsigned>(blocks), threads_for(packed ? c.d / N : c.d), smem,
             cudaStreamPerThread>>>(
        ptr<T>(dy), ptr<T>(x), ptr<T>(weight), mean.defined() ? ptr<float>(mean) : nullptr,
        ptr<float>(rstd), static_cast<T*>(dx.raw()),
        want_dw ? static_cast<float*>(dw_partial.raw()) : nullptr,
        want_db ? static_cast<float*>(db_partial.raw()) : nullptr, c.rows, rows_per_block, c.d);
  });
  check_launch(c.op, x.shape());
  if (want_dw) add_column_sums(dw_partial, dweight, c.op);
  if (want_db) add_column_sums(db_partial, dbias, c.op);
}

}  // namespace

void rmsnorm_forward(const Tensor& x, const Tensor& weight, double eps, Tensor& y, Tensor& rstd) {
  const NormCall c = prepare("rmsnorm_forward", x, {{&weight, "weight"}, {&y, "output"}}, {{&rstd, "rstd"}});
  Tensor no_mean;
  norm_forward(c, x, weight, Tensor(), eps, y, no_mean, rstd);
}

void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                      Tensor& dx, Tensor& dweight) {
  const NormCall c = prepare("rmsnorm_backward", x,
                             {{&dy, "grad"}, {&weight, "weight"}, {&dx, "input grad"}}, {{&rstd, "rstd"}});
  Tensor no_bias;
  norm_backward(c, dy, x, weight, Tensor(), rstd, dx, dweight, no_bias);
}

void layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                       Tensor& y, Tensor& mean, Tensor& rstd) {
  const NormCall c = prepare("layernorm_forward", x,
                             {{&weight, "weight"}, {&bias, "bias"}, {&y, "output"}},
                             {{&mean, "mean"}, {&rstd, "rstd"}});
  norm_forward(c, x, weight, bias, eps, y, mean, rstd);
}

void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias) {
  const NormCall c = prepare("layernorm_backward", x,
                             {{&dy, "grad"}, {&weight, "weight"}, {&dx, "input grad"}},
                             {{&mean, "mean"}, {&rstd, "rstd"}});
  norm_backward(c, dy, x, weight, mean, rstd, dx, dweight, dbias);
}

}  // namespace amber::cuda
