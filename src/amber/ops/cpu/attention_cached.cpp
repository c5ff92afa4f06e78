// CPU generation over a KV cache: the new tokens' rows written into the cache, and one
// query row at a time attending over its sequence's cached keys, with the same masking
// and sink rules as training.
#include <cmath>
#include <cstring>
#include <vector>

#include "amber/ops/cpu/attention.h"
#include "amber/ops/cpu/dispatch.h"

namespace amber::cpu {
namespace {

// Sequence s's new tokens [cu_q[s], cu_q[s + 1]) at starts[s] onwards, checked against
// the cache's capacity.
struct CachedRows {
  std::vector<int32_t> cu_q, starts;
  int sequences() const { return static_cast<int>(starts.size()); }
};

CachedRows cached_rows(const Tensor& cu_q, const Tensor& starts, int64_t tokens, int64_t capacity,
                       const char* op) {
  require_cpu(cu_q, op);
  const int32_t *cu = cu_q.data<int32_t>(), *st = starts.data<int32_t>();
  CachedRows r{{cu, cu + cu_q.numel()}, {st, st + starts.numel()}};
  AMBER_CHECK(r.cu_q.front() == 0 && r.cu_q.back() == tokens, op, ": cu_q must run from 0 to the ", tokens,
              " new tokens, got ", r.cu_q.front(), " .. ", r.cu_q.back());
  for (int s = 0; s < r.sequences(); ++s) {
    const int32_t count = r.cu_q[s + 1] - r.cu_q[s];
    AMBER_CHECK(count >= 0 && r.starts[s] >= 0, op, ": sequence ", s, " has ", count, " new tokens at position ",
                r.starts[s]);
    AMBER_CHECK(r.starts[s] + count <= capacity, op, ": sequence ", s, " needs ", r.starts[s] + count,
                " cache positions but the cache holds ", capacity,
                "; make the cache as long as the prompt plus the new tokens");
  }
  return r;
}

}  // namespace

void kv_cache_append(const Tensor& k, const Tensor& v, const Tensor& cu_q, const Tensor& starts, Tensor& k_cache,
                     Tensor& v_cache) {
  const char* op = "kv_cache_append";
  require_cpu(k, op);
  const CachedRows r = cached_rows(cu_q, starts, k.size(0), k_cache.size(1), op);
  const size_t row_bytes = static_cast<size_t>(k.size(1) * k.size(2)) * dtype_size(k.dtype());
  const int64_t capacity = k_cache.size(1);
  for (const auto& [src, cache] : {std::pair{&k, &k_cache}, std::pair{&v, &v_cache}}) {
    const char* from = static_cast<const char*>(src->raw());
    char* to = static_cast<char*>(cache->raw());
    const size_t src_stride = static_cast<size_t>(src->stride(0)) * dtype_size(src->dtype());
    for (int s = 0; s < r.sequences(); ++s)
      for (int32_t t = r.cu_q[s]; t < r.cu_q[s + 1]; ++t) {
        const int64_t position = r.starts[s] + (t - r.cu_q[s]);
        std::memcpy(to + static_cast<size_t>(s * capacity + position) * row_bytes, from + t * src_stride, row_bytes);
      }
  }
}

void attention_cached_forward(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& cu_q,
                              const Tensor& starts, const AttentionOptions& options, const Tensor& sinks,
                              Tensor& out) {
  const char* op = "attention_cached_forward";
  require_cpu(q, op);
  const int64_t heads = q.size(1), dim = q.size(2), kv_heads = k_cache.size(2), capacity = k_cache.size(1);
  const CachedRows r = cached_rows(cu_q, starts, q.size(0), capacity, op);
  const double scale = options.softmax_scale;
  const int64_t group = heads / kv_heads;
  with_compute_type(q.dtype(), [&]<class T>() {
    const Tensor qw = widened<T>(q), kw = widened<T>(k_cache), vw = widened<T>(v_cache);
    const Tensor sw = sinks.defined() ? widened<T>(sinks) : Tensor();
    Output<T> o(out);
    const T *pq = qw.data<T>(), *pk = kw.data<T>(), *pv = vw.data<T>();
    const T* ps = sw.defined() ? sw.data<T>() : nullptr;
    T* po = o.data();
    for (int s = 0; s < r.sequences(); ++s) {
      const int64_t rows = r.cu_q[s + 1] - r.cu_q[s];
#pragma omp parallel for collapse(2) if (rows * heads > 8)
      for (int64_t j = 0; j < rows; ++j)
        for (int64_t h = 0; h < heads; ++h) {
          const int64_t t = r.cu_q[s] + j, position = r.starts[s] + j, kvh = h / group;
          const int64_t first = options.window > 0 ? std::max<int64_t>(0, position - options.window + 1) : 0;
          const T* qrow = pq + (t * heads + h) * dim;
          std::vector<T> scores(static_cast<size_t>(position - first + 1));
          T max = ps ? ps[h] : -INFINITY;
          for (int64_t key = first; key <= position; ++key) {
            const T* krow = pk + ((s * capacity + key) * kv_heads + kvh) * dim;
            T dot = 0;
            for (int64_t d = 0; d < dim; ++d) dot += qrow[d] * krow[d];
            scores[key - first] = dot * static_cast<T>(scale);
            max = std::max(max, scores[key - first]);
          }
          T sum = ps ? std::exp(ps[h] - max) : T(0);
          for (T& x : scores) sum += (x = std::exp(x - max));
          T* orow = po + (t * heads + h) * dim;
          for (int64_t d = 0; d < dim; ++d) orow[d] = 0;
          for (int64_t key = first; key <= position; ++key) {
            const T p = scores[key - first] / sum;
            const T* vrow = pv + ((s * capacity + key) * kv_heads + kvh) * dim;
            for (int64_t d = 0; d < dim; ++d) orow[d] += p * vrow[d];
          }
        }
    }
    o.store();
  });
}

}  // namespace amber::cpu
