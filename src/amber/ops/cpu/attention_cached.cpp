// CPU attention over a KV cache for generation: one query row at a time against
// its sequence's cached keys, with the same masking and sink rules as training.
#include <cmath>
#include <vector>

#include "amber/ops/attention.h"
#include "amber/ops/cpu/dispatch.h"

namespace amber {

void attention_cached_forward(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                              const std::vector<int32_t>& cu_q, const std::vector<int32_t>& starts,
                              const AttentionOptions& options, const Tensor& sinks, Tensor& out) {
  const char* op = "attention_cached_forward";
  cpu::require_cpu(q, op);
  AMBER_CHECK(q.ndim() == 3 && k_cache.ndim() == 4 && k_cache.shape() == v_cache.shape(), op,
              ": q ", q.shape(), " must be [T, H, D] and the caches [S, capacity, Hkv, D], got ",
              k_cache.shape(), " and ", v_cache.shape());
  const int64_t heads = q.size(1), dim = q.size(2), kv_heads = k_cache.size(2), capacity = k_cache.size(1);
  const int seqs = static_cast<int>(cu_q.size()) - 1;
  AMBER_CHECK(seqs == k_cache.size(0) && static_cast<int>(starts.size()) == seqs && cu_q.back() == q.size(0),
              op, ": ", seqs, " sequences in cu_q, ", starts.size(), " starts, cache for ", k_cache.size(0));
  AMBER_CHECK(k_cache.size(3) == dim && heads % kv_heads == 0, op, ": cache ", k_cache.shape(),
              " does not fit q ", q.shape());
  for (int s = 0; s < seqs; ++s)
    AMBER_CHECK(starts[s] + cu_q[s + 1] - cu_q[s] <= capacity, op, ": sequence ", s, " needs ",
                starts[s] + cu_q[s + 1] - cu_q[s], " cache positions, the cache holds ", capacity,
                "; raise max_new_tokens' budget (the cache capacity)");
  require_same_shape(q, out, op);
  const double scale = options.softmax_scale > 0 ? options.softmax_scale : 1.0 / std::sqrt(static_cast<double>(dim));
  const int64_t group = heads / kv_heads;
  cpu::with_compute_type(q.dtype(), [&]<class T>() {
    const Tensor qw = cpu::widened<T>(q), kw = cpu::widened<T>(k_cache), vw = cpu::widened<T>(v_cache);
    const Tensor sw = sinks.defined() ? cpu::widened<T>(sinks) : Tensor();
    cpu::Output<T> o(out);
    const T *pq = qw.data<T>(), *pk = kw.data<T>(), *pv = vw.data<T>();
    const T* ps = sw.defined() ? sw.data<T>() : nullptr;
    T* po = o.data();
    for (int s = 0; s < seqs; ++s) {
      const int64_t rows = cu_q[s + 1] - cu_q[s];
#pragma omp parallel for collapse(2) if (rows * heads > 8)
      for (int64_t j = 0; j < rows; ++j)
        for (int64_t h = 0; h < heads; ++h) {
          const int64_t t = cu_q[s] + j, position = starts[s] + j, kvh = h / group;
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

}  // namespace amber
