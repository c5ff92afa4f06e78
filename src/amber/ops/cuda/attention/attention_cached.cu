// CUDA generation over a KV cache (ops/attention.h): the new tokens' keys and values
// written into their cache rows, and attention of the new tokens over the cache. Both
// read the step's geometry (cu_q, starts) on the device, so one captured decode step
// replays at every position. A decode step has one query per sequence and head: a block
// per (query, head) whose warps split the keys, each with its own online softmax,
// combined once at the end in a fixed order (deterministic).
#include <cmath>

#include "amber/core/stream.h"
#include "amber/ops/cuda/attention/attention.h"
#include "amber/ops/cuda/attention/attention_tiles.cuh"
#include "amber/ops/cuda/common/common.cuh"

namespace amber::cuda {
namespace {

constexpr int kAppendThreads = 128;
constexpr int kCachedWarps = 4;

// The sequence owning packed token t: the last s with cu_q[s] <= t (a step has few
// sequences, so a walk beats a search).
__device__ __forceinline__ int sequence_of(const int32_t* cu_q, int sequences, int t) {
  int s = 0;
  while (s + 1 < sequences && cu_q[s + 1] <= t) ++s;
  return s;
}

struct CacheGeometry {
  int sequences, capacity, kv_heads;
  int64_t row;  // elements of one cached token: kv_heads * head_dim
};

// One block per new token; rows past the capacity are dropped (never written out of
// bounds) since the device cannot report them.
template <class T>
__global__ void __launch_bounds__(kAppendThreads)
    append_kernel(const T* k, int64_t k_stride, const T* v, int64_t v_stride, const int32_t* cu_q,
                  const int32_t* starts, CacheGeometry g, T* k_cache, T* v_cache) {
  const int t = blockIdx.x;
  const int s = sequence_of(cu_q, g.sequences, t);
  const int position = starts[s] + (t - cu_q[s]);
  if (position < 0 || position >= g.capacity) return;
  const int64_t at = (static_cast<int64_t>(s) * g.capacity + position) * g.row;
  for (int64_t i = threadIdx.x; i < g.row; i += kAppendThreads) {
    k_cache[at + i] = k[t * k_stride + i];
    v_cache[at + i] = v[t * v_stride + i];
  }
}

struct CachedArgs {
  int sequences, capacity, heads, kv_heads, window;
  float scale;
  const int32_t *cu_q, *starts;
  const float* sinks;  // f32 [heads] or null
};

// Block (t, h): query head h of new token t against its sequence's keys first..last.
// Lane l holds head dimensions [l * DL, (l + 1) * DL); warp w takes keys first + w,
// first + w + kCachedWarps, ...; a score is one warp's shuffle sum.
template <class T, int DL>
__global__ void __launch_bounds__(kCachedWarps * 32)
    cached_attention_kernel(const T* q, const T* k_cache, const T* v_cache, CachedArgs a, T* out) {
  constexpr int D = DL * 32;
  __shared__ float warp_top[kCachedWarps], warp_mass[kCachedWarps];
  __shared__ float warp_acc[kCachedWarps][D];
  const int t = blockIdx.x, h = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int s = sequence_of(a.cu_q, a.sequences, t);
  const int position = a.starts[s] + (t - a.cu_q[s]);
  const int last = min(position, a.capacity - 1);
  const int first = a.window > 0 ? max(0, position - a.window + 1) : 0;
  const int kvh = h / (a.heads / a.kv_heads);

  float qv[DL];
  load_f32<T, DL>(q + (static_cast<int64_t>(t) * a.heads + h) * D + lane * DL, qv);
  const int64_t key_stride = static_cast<int64_t>(a.kv_heads) * D;
  const int64_t head_offset = (static_cast<int64_t>(s) * a.capacity * a.kv_heads + kvh) * D + lane * DL;
  const T *keys = k_cache + head_offset, *values = v_cache + head_offset;
  float m = -INFINITY, l = 0.0f, acc[DL];
#pragma unroll
  for (int e = 0; e < DL; ++e) acc[e] = 0.0f;
  for (int key = first + warp; key <= last; key += kCachedWarps) {
    float kv[DL], vv[DL];
    load_f32<T, DL>(keys + key * key_stride, kv);
    load_f32<T, DL>(values + key * key_stride, vv);
    float dot = 0.0f;
#pragma unroll
    for (int e = 0; e < DL; ++e) dot = fmaf(qv[e], kv[e], dot);
    const float score = warp_sum(dot) * a.scale;
    const float m_new = fmaxf(m, score);
    const float correction = expf(m - m_new), p = expf(score - m_new);
    l = fmaf(l, correction, p);
#pragma unroll
    for (int e = 0; e < DL; ++e) acc[e] = fmaf(p, vv[e], acc[e] * correction);
    m = m_new;
  }
  if (lane == 0) {
    warp_top[warp] = m;
    warp_mass[warp] = l;
  }
#pragma unroll
  for (int e = 0; e < DL; ++e) warp_acc[warp][lane * DL + e] = acc[e];
  __syncthreads();

  // The sink is a key of logit sinks[h] and value zero: it joins the normaliser only.
  float top = a.sinks ? a.sinks[h] : -INFINITY;
#pragma unroll
  for (int w = 0; w < kCachedWarps; ++w) top = fmaxf(top, warp_top[w]);
  float weight[kCachedWarps], denominator = a.sinks ? expf(a.sinks[h] - top) : 0.0f;
#pragma unroll
  for (int w = 0; w < kCachedWarps; ++w) {
    weight[w] = expf(warp_top[w] - top);  // 0 for a warp that saw no key
    denominator = fmaf(warp_mass[w], weight[w], denominator);
  }
  T* row = out + (static_cast<int64_t>(t) * a.heads + h) * D;
  for (int d = threadIdx.x; d < D; d += kCachedWarps * 32) {
    float o = 0.0f;
#pragma unroll
    for (int w = 0; w < kCachedWarps; ++w) o = fmaf(warp_acc[w][d], weight[w], o);
    row[d] = from_f32<T>(o / denominator);
  }
}

template <class T>
void launch_cached_attention(const T* q, const T* k_cache, const T* v_cache, const CachedArgs& a, int64_t tokens,
                             int64_t dim, T* out, const char* op) {
  const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>(a.heads));
  const auto launch = [&](auto kernel) { kernel<<<grid, kCachedWarps * 32, 0, current_stream()>>>(q, k_cache, v_cache, a, out); };
  switch (dim) {
    case 32: launch(cached_attention_kernel<T, 1>); return;
    case 64: launch(cached_attention_kernel<T, 2>); return;
    case 128: launch(cached_attention_kernel<T, 4>); return;
    case 256: launch(cached_attention_kernel<T, 8>); return;
    default: fail(op, ": head_dim ", dim, " has no CUDA kernel (32, 64, 128 or 256); generate on the CPU");
  }
}

}  // namespace

void kv_cache_append(const Tensor& k, const Tensor& v, const Tensor& cu_q, const Tensor& starts, Tensor& k_cache,
                     Tensor& v_cache) {
  const char* op = "kv_cache_append";
  const int64_t tokens = k.size(0);
  if (tokens == 0) return;
  const CacheGeometry g{static_cast<int>(starts.numel()), static_cast<int>(k_cache.size(1)),
                        static_cast<int>(k_cache.size(2)), k_cache.size(2) * k_cache.size(3)};
  with_element_type(k.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    append_kernel<T><<<static_cast<unsigned>(tokens), kAppendThreads, 0, current_stream()>>>(
        static_cast<const T*>(k.raw()), k.stride(0), static_cast<const T*>(v.raw()), v.stride(0),
        static_cast<const int32_t*>(cu_q.raw()), static_cast<const int32_t*>(starts.raw()), g,
        static_cast<T*>(k_cache.raw()), static_cast<T*>(v_cache.raw()));
  });
  check_launch(op, k.shape());
}

void attention_cached_forward(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& cu_q,
                              const Tensor& starts, const AttentionOptions& options, const Tensor& sinks,
                              Tensor& out) {
  const char* op = "attention_cached_forward";
  if (q.size(0) == 0) return;
  const Tensor sinks32 = sinks_f32(sinks, op);
  const CachedArgs a{static_cast<int>(starts.numel()),
                     static_cast<int>(k_cache.size(1)),
                     static_cast<int>(q.size(1)),
                     static_cast<int>(k_cache.size(2)),
                     options.window,
                     static_cast<float>(options.softmax_scale),
                     static_cast<const int32_t*>(cu_q.raw()),
                     static_cast<const int32_t*>(starts.raw()),
                     sinks32.defined() ? static_cast<const float*>(sinks32.raw()) : nullptr};
  with_element_type(q.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    launch_cached_attention<T>(static_cast<const T*>(q.raw()), static_cast<const T*>(k_cache.raw()),
                               static_cast<const T*>(v_cache.raw()), a, q.size(0), q.size(2),
                               static_cast<T*>(out.raw()), op);
  });
  check_launch(op, q.shape());
}

}  // namespace amber::cuda
