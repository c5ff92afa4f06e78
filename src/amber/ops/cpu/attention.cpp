// CPU attention over packed documents as products of blocks: each 64-row query block
// of a document takes its scores against every key it sees in one BLAS product, turns
// them into probabilities in vector lanes, and takes its output in a second product.
// The backward walks a document's query blocks in order and computes each probability
// once, from the saved log-sum-exp. The oracle for GPU kernels.
//
// Every result depends on the inputs alone: blocks are aligned to the document start
// and sized by the document (never by the thread count or the neighbours; tests pin
// both), a BLAS product's bits depend on its shape alone, each task owns the rows it
// writes, and the element-wise passes run the same operations at every vector width.
#include "amber/ops/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "amber/ops/cpu/blas.h"
#include "amber/ops/cpu/dispatch.h"
#include "amber/ops/cpu/vector_math.h"

namespace amber::cpu {
namespace {

// Query rows per block. Its keys' causal triangle is the only work a product spends
// on keys a row does not see; 64 rows keep that under a tenth of a 512-token document
// while the products stay large enough for the BLAS kernels (single-threaded sgemm of
// these shapes: 73 GFLOP/s at 32 rows, 92 at 64, 101 at 128 on the 2-core Xeon of
// docs/perf/cpu.md).
constexpr int32_t kBlock = 64;

// Shapes and options as the kernels read them; q/out rows are [T, H, D], k/v rows [T, Hkv, D].
template <class T>
struct Geometry {
  int64_t heads, kv_heads, dim;
  int32_t window;
  T scale;

  int64_t group() const { return heads / kv_heads; }
  int64_t q_stride() const { return heads * dim; }
  int64_t kv_stride() const { return kv_heads * dim; }
  int64_t q_row(int64_t token, int64_t h) const { return token * q_stride() + h * dim; }
  int64_t kv_row(int64_t token, int64_t g) const { return token * kv_stride() + g * dim; }
  // Query position i sees keys first_key(i) .. i of its document.
  int32_t first_key(int32_t i) const { return window > 0 ? std::max(0, i - window + 1) : 0; }
};

// Query rows [begin, end) of the document starting at token `doc_start`, and the keys
// [key_begin, end) that the rows see between them.
struct Block {
  int64_t doc_start;
  int32_t begin, end, key_begin;

  int32_t rows() const { return end - begin; }
  int32_t keys() const { return end - key_begin; }
  // Row r sees the block's key columns [seen_from(r), seen_to(r)).
  template <class T>
  int32_t seen_from(const Geometry<T>& g, int32_t r) const { return g.first_key(begin + r) - key_begin; }
  int32_t seen_to(int32_t r) const { return begin + r + 1 - key_begin; }
};

template <class T>
Block block_of(const Geometry<T>& g, int64_t doc_start, int32_t begin, int32_t length) {
  return {doc_start, begin, std::min(begin + kBlock, length), g.first_key(begin)};
}

template <class T>
std::vector<Block> blocks_of(const Geometry<T>& g, const SeqInfo& seq) {
  std::vector<Block> blocks;
  for (int doc = 0; doc < seq.num_docs; ++doc)
    for (int32_t begin = 0; begin < seq.doc_length(doc); begin += kBlock)
      blocks.push_back(block_of(g, seq.doc_start(doc), begin, seq.doc_length(doc)));
  return blocks;
}

// Scratch for one block's [rows, keys] matrix.
size_t block_scratch(const SeqInfo& seq) {
  int32_t longest = 0;
  for (int doc = 0; doc < seq.num_docs; ++doc) longest = std::max(longest, seq.doc_length(doc));
  return static_cast<size_t>(kBlock) * longest;
}

// Eight running sums, one per d mod 8, added pairwise: a single running sum waits on
// each add in turn, and the compiler may not reorder it into vector lanes.
constexpr int64_t kDotLanes = 8;
template <class T>
T dot(const T* a, const T* b, int64_t n) {
  T lane[kDotLanes] = {};
  const int64_t whole = n - n % kDotLanes;
  for (int64_t d = 0; d < whole; d += kDotLanes)
    for (int64_t l = 0; l < kDotLanes; ++l) lane[l] += a[d + l] * b[d + l];
  for (int64_t d = whole; d < n; ++d) lane[d - whole] += a[d] * b[d];
  return ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
}

// A block's scores s [rows, keys] become exp(scale s - m) where the row sees the key
// and 0 elsewhere, m the row's largest seen logit; row_max gets m and row_sum the sum
// of the row. A sink is a logit every row sees, with a zero value: it enters m and the
// sum, not the products.
template <class T>
AMBER_VECTOR_CLONES void softmax_rows(const Geometry<T>& g, const Block& b, const T* sink, T* s, T* row_max,
                                      T* row_sum) {
  const int32_t keys = b.keys();
  for (int32_t r = 0; r < b.rows(); ++r) {
    T* x = s + static_cast<int64_t>(r) * keys;
    T *seen = x + b.seen_from(g, r), *seen_end = x + b.seen_to(r);
    const int64_t n = seen_end - seen;
    for (int64_t j = 0; j < n; ++j) seen[j] *= g.scale;
    const T m = sink ? std::max(*sink, max_of(seen, n)) : max_of(seen, n);
    for (int64_t j = 0; j < n; ++j) seen[j] = exp_lanes(seen[j] - m);
    std::fill(x, seen, T(0));
    std::fill(seen_end, x + keys, T(0));
    row_sum[r] = fixed_order_sum(seen, n) + (sink ? exp_lanes(*sink - m) : T(0));
    row_max[r] = m;
  }
}

template <class T>
void forward_kernel(const Geometry<T>& g, const SeqInfo& seq, const T* q, const T* k, const T* v,
                    const T* sinks, T* out, T* lse) {
  const std::vector<Block> blocks = blocks_of(g, seq);
  const int64_t H = g.heads, work = static_cast<int64_t>(blocks.size()) * H;
#pragma omp parallel
  {
    std::vector<T> s(block_scratch(seq)), row_max(kBlock), row_sum(kBlock);
#pragma omp for schedule(dynamic)
    for (int64_t w = 0; w < work; ++w) {
      const Block& b = blocks[w / H];
      const int64_t h = w % H;
      const int64_t first_row = g.q_row(b.doc_start + b.begin, h);
      const int64_t first_key = g.kv_row(b.doc_start + b.key_begin, h / g.group());
      blas_gemm(false, true, b.rows(), b.keys(), g.dim, 1.0, q + first_row, g.q_stride(), k + first_key,
                g.kv_stride(), 0.0, s.data(), b.keys());
      softmax_rows(g, b, sinks ? sinks + h : nullptr, s.data(), row_max.data(), row_sum.data());
      blas_gemm(false, false, b.rows(), g.dim, b.keys(), 1.0, s.data(), b.keys(), v + first_key, g.kv_stride(),
                0.0, out + first_row, g.q_stride());
      for (int32_t r = 0; r < b.rows(); ++r) {
        T* o = out + first_row + r * g.q_stride();
        for (int64_t d = 0; d < g.dim; ++d) o[d] /= row_sum[r];
        lse[(b.doc_start + b.begin + r) * H + h] = row_max[r] + std::log(row_sum[r]);
      }
    }
  }
}

// Inputs of the backward. delta[t, h] = dout . out of that row.
template <class T>
struct BackwardInputs {
  const T *q, *k, *v, *dout, *lse, *delta;
};

// For head h of a block: its scores p [rows, keys] become the probabilities
// exp(scale s - lse) where the row sees the key and 0 elsewhere, and dp (dout . v)
// becomes the scores' gradient p (dp - delta).
template <class T>
AMBER_VECTOR_CLONES void probabilities_and_grads(const Geometry<T>& g, const Block& b, int64_t h,
                                                 const BackwardInputs<T>& in, T* p, T* dp) {
  const int32_t keys = b.keys();
  for (int32_t r = 0; r < b.rows(); ++r) {
    const int64_t stat = (b.doc_start + b.begin + r) * g.heads + h, offset = static_cast<int64_t>(r) * keys;
    const T lse = in.lse[stat], delta = in.delta[stat];
    const int32_t from = b.seen_from(g, r), to = b.seen_to(r);
    T *x = p + offset, *dx = dp + offset;
    for (int32_t j = from; j < to; ++j) {
      x[j] = exp_lanes(g.scale * x[j] - lse);
      dx[j] = x[j] * (dx[j] - delta);
    }
    for (T* row : {x, dx}) {
      std::fill(row, row + from, T(0));
      std::fill(row + to, row + keys, T(0));
    }
  }
}

// dq, dk and dv, one (document, KV head) per task: the task owns the dq rows of its
// group's query heads and the dk/dv rows of its KV head, so it accumulates dk and dv
// over the document's query blocks (in order, each block's heads in order) without
// atomics, and writes each block's dq whole.
template <class T>
void backward_documents_kernel(const Geometry<T>& g, const SeqInfo& seq, const BackwardInputs<T>& in, T* dq,
                               T* dk, T* dv) {
  const int64_t D = g.dim, work = static_cast<int64_t>(seq.num_docs) * g.kv_heads;
  const int64_t qs = g.q_stride(), kvs = g.kv_stride();
#pragma omp parallel
  {
    std::vector<T> p(block_scratch(seq)), ds(block_scratch(seq));
#pragma omp for schedule(dynamic)
    for (int64_t w = 0; w < work; ++w) {
      const int doc = static_cast<int>(w / g.kv_heads);
      const int64_t kvh = w % g.kv_heads, doc_start = seq.doc_start(doc);
      const int32_t length = seq.doc_length(doc);
      for (int32_t i = 0; i < length; ++i) {
        std::fill_n(dk + g.kv_row(doc_start + i, kvh), D, T(0));
        std::fill_n(dv + g.kv_row(doc_start + i, kvh), D, T(0));
      }
      for (int32_t begin = 0; begin < length; begin += kBlock) {
        const Block b = block_of(g, doc_start, begin, length);
        const int32_t rows = b.rows(), keys = b.keys();
        const int64_t first_key = g.kv_row(doc_start + b.key_begin, kvh);
        for (int64_t h = kvh * g.group(); h < (kvh + 1) * g.group(); ++h) {
          const int64_t first_row = g.q_row(doc_start + b.begin, h);
          blas_gemm(false, true, rows, keys, D, 1.0, in.q + first_row, qs, in.k + first_key, kvs, 0.0, p.data(), keys);
          blas_gemm(false, true, rows, keys, D, 1.0, in.dout + first_row, qs, in.v + first_key, kvs, 0.0, ds.data(),
                    keys);
          probabilities_and_grads(g, b, h, in, p.data(), ds.data());
          blas_gemm(false, false, rows, D, keys, g.scale, ds.data(), keys, in.k + first_key, kvs, 0.0, dq + first_row,
                    qs);
          blas_gemm(true, false, keys, D, rows, g.scale, ds.data(), keys, in.q + first_row, qs, 1.0, dk + first_key,
                    kvs);
          blas_gemm(true, false, keys, D, rows, 1.0, p.data(), keys, in.dout + first_row, qs, 1.0, dv + first_key, kvs);
        }
      }
    }
  }
}

// Overwrites dq, dk, dv and adds the sink gradients to dsinks (both null without sinks).
template <class T>
void backward_kernel(const Geometry<T>& g, const SeqInfo& seq, BackwardInputs<T> in, const T* out,
                     const T* sinks, T* dq, T* dk, T* dv, T* dsinks) {
  const int64_t H = g.heads, D = g.dim, tokens = seq.total_tokens;
  std::vector<T> delta(static_cast<size_t>(tokens * H));
#pragma omp parallel for
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      delta[t * H + h] = dot(in.dout + g.q_row(t, h), out + g.q_row(t, h), D);
    }
  }
  in.delta = delta.data();
  backward_documents_kernel(g, seq, in, dq, dk, dv);
  // A sink moves only the normaliser: d lse_i / d s_h = P_i,sink and d loss / d lse_i = -D_i.
  // One task per head sums its rows in order, so the result is deterministic.
  if (!sinks) return;
#pragma omp parallel for
  for (int64_t h = 0; h < H; ++h) {
    T sum = 0;
    for (int64_t t = 0; t < tokens; ++t) {
      sum -= std::exp(sinks[h] - in.lse[t * H + h]) * delta[t * H + h];
    }
    dsinks[h] += sum;
  }
}

template <class T>
Geometry<T> geometry_of(const Tensor& q, const Tensor& k, const AttentionOptions& options) {
  return {q.size(1), k.size(1), q.size(2), options.window, static_cast<T>(options.softmax_scale)};
}

}  // namespace

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const SeqInfo& seq,
                       const AttentionOptions& options, const Tensor& sinks, Tensor& out,
                       Tensor& lse) {
  with_compute_type(q.dtype(), [&]<class T>() {
    const Tensor q_t = widened<T>(q), k_t = widened<T>(k), v_t = widened<T>(v);
    const Tensor sinks_t = sinks.defined() ? widened<T>(sinks) : Tensor();
    Output<T> out_t(out), lse_t(lse);
    forward_kernel(geometry_of<T>(q, k, options), seq, q_t.template data<T>(),
                   k_t.template data<T>(), v_t.template data<T>(),
                   sinks_t.defined() ? sinks_t.template data<T>() : nullptr, out_t.data(),
                   lse_t.data());
    out_t.store();
    lse_t.store();
  });
}

void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out, const Tensor& lse, const SeqInfo& seq,
                        const AttentionOptions& options, const Tensor& sinks, Tensor& dq,
                        Tensor& dk, Tensor& dv, Tensor& dsinks) {
  with_compute_type(q.dtype(), [&]<class T>() {
    const Tensor q_t = widened<T>(q), k_t = widened<T>(k), v_t = widened<T>(v);
    const Tensor dout_t = widened<T>(dout), out_t = widened<T>(out);
    const Tensor lse_t = widened<T>(lse);
    const Tensor sinks_t = sinks.defined() ? widened<T>(sinks) : Tensor();
    Output<T> dq_t(dq), dk_t(dk), dv_t(dv);
    std::optional<Output<T>> dsinks_t;
    if (sinks.defined()) dsinks_t.emplace(dsinks, /*accumulate=*/true);
    backward_kernel(
        geometry_of<T>(q, k, options), seq,
        BackwardInputs<T>{q_t.template data<T>(), k_t.template data<T>(), v_t.template data<T>(),
                          dout_t.template data<T>(), lse_t.template data<T>(), nullptr},
        out_t.template data<T>(), sinks_t.defined() ? sinks_t.template data<T>() : nullptr,
        dq_t.data(), dk_t.data(), dv_t.data(), dsinks_t ? dsinks_t->data() : nullptr);
    dq_t.store();
    dk_t.store();
    dv_t.store();
    if (dsinks_t) dsinks_t->store();
  });
}

}  // namespace amber::cpu
