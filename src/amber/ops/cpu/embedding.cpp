// CPU embedding gather and scatter-add; token ids are validated here, on the host.
#include "amber/ops/cpu/embedding.h"

#include <cstring>

#include "amber/ops/cpu/dispatch.h"

namespace amber::cpu {
namespace {

void check_ids(const Tensor& ids, int64_t vocab, const char* op) {
  const int32_t* p = ids.data<int32_t>();
  for (int64_t t = 0; t < ids.numel(); ++t)
    AMBER_CHECK(p[t] >= 0 && p[t] < vocab, op, ": token id ", p[t], " at position ", t,
                " is outside the vocabulary [0, ", vocab, "); the tokenizer and the model's "
                "vocab_size disagree");
}

}  // namespace

void embedding_forward(const Tensor& table, const Tensor& ids, Tensor& out) {
  check_ids(ids, table.size(0), "embedding_forward");
  require_contiguous(table, "embedding_forward");
  const int64_t tokens = ids.numel(), dim = table.size(1);
  const int32_t* p = ids.data<int32_t>();
  if (table.dtype() == out.dtype()) {
    const size_t row_bytes = static_cast<size_t>(dim) * dtype_size(table.dtype());
    const char* src = static_cast<const char*>(table.raw());
    char* dst = static_cast<char*>(out.raw());
#pragma omp parallel for if (tokens * dim > 65536)
    for (int64_t t = 0; t < tokens; ++t) std::memcpy(dst + t * row_bytes, src + p[t] * row_bytes, row_bytes);
    return;
  }
  for (int64_t t = 0; t < tokens; ++t) {
    Tensor row = out.select(0, t);
    row.copy_from(table.select(0, p[t]));
  }
}

void embedding_backward(const Tensor& dout, const Tensor& ids, Tensor& dtable) {
  check_ids(ids, dtable.size(0), "embedding_backward");
  const int64_t tokens = ids.numel(), dim = dtable.size(1);
  const int32_t* p = ids.data<int32_t>();
  with_compute_type(dtable.dtype(), [&]<class T>() {
    const Tensor g = widened<T>(dout);
    Output<T> out(dtable, true);
    const T* pg = g.data<T>();
    T* pt = out.data();
    // Threads own disjoint column ranges and walk tokens in order: no atomics, and
    // the same sums for any thread count.
    constexpr int64_t kCols = 64;
#pragma omp parallel for if (tokens * dim > 65536)
    for (int64_t c0 = 0; c0 < dim; c0 += kCols) {
      const int64_t c1 = std::min(dim, c0 + kCols);
      for (int64_t t = 0; t < tokens; ++t)
        for (int64_t c = c0; c < c1; ++c) pt[p[t] * dim + c] += pg[t * dim + c];
    }
    out.store();
  });
}

}  // namespace amber::cpu
