// CPU attention over packed documents: a flash-style forward (query tiles walk key
// tiles with an online softmax, never a T x T matrix) and a backward that walks each
// document's key tiles once, computing every probability once from the saved
// log-sum-exp. The oracle for GPU kernels.
//
// Every sum runs in an order fixed by the inputs alone (thread count, alignment and
// vector width do not enter; a test pins that): a score is summed over d in order, the
// products of a key tile are added in key order, key tiles in order. The inner loops
// run over the 32 keys of a tile or the d of a row, which the compiler puts in vector
// lanes without reordering any sum.
#include "amber/ops/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "amber/ops/cpu/dispatch.h"
#include "amber/ops/cpu/vector_math.h"

namespace amber::cpu {
namespace {

// Rows per query tile and keys per key tile. A tile's 32 x 64 keys are 8 KiB, so they
// stay in L1 while every row of the query tile reads them.
constexpr int32_t kTile = 32;

// Positions [begin, end) of one document, which starts at token `doc_start`. Tiles are
// aligned to the document start, so a document's arithmetic never depends on its
// neighbours (a test pins that).
struct Tile {
  int64_t doc_start;
  int32_t doc_length, begin, end;
};

std::vector<Tile> tiles_of(const SeqInfo& seq) {
  std::vector<Tile> tiles;
  for (int doc = 0; doc < seq.num_docs; ++doc) {
    const int32_t length = seq.doc_length(doc);
    for (int32_t begin = 0; begin < length; begin += kTile) {
      tiles.push_back({seq.doc_start(doc), length, begin, std::min(begin + kTile, length)});
    }
  }
  return tiles;
}

// Shapes and options as the kernels read them; q/out rows are [T, H, D], k/v rows [T, Hkv, D].
template <class T>
struct Geometry {
  int64_t heads, kv_heads, dim;
  int32_t window;
  T scale;

  int64_t group() const { return heads / kv_heads; }
  int64_t q_row(int64_t token, int64_t h) const { return (token * heads + h) * dim; }
  int64_t kv_row(int64_t token, int64_t g) const { return (token * kv_heads + g) * dim; }
  // Query position i sees keys first_key(i) .. i of its document.
  int32_t first_key(int32_t i) const { return window > 0 ? std::max(0, i - window + 1) : 0; }
};

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

// Rows [first, first + count) of one head of a [T, heads, D] tensor (row(t) its start),
// transposed into out[d * kTile + j]; columns past count are zero.
template <class T, class Row>
void transpose_tile(const T* x, Row row, int32_t first, int32_t count, int64_t dim, T* out) {
  std::fill(out, out + dim * kTile, T(0));
  for (int32_t j = 0; j < count; ++j) {
    const T* xj = x + row(first + j);
    for (int64_t d = 0; d < dim; ++d) out[d * kTile + j] = xj[d];
  }
}

// Query rows handled together. One row's sums form a chain of dependent adds (two
// vector registers wide for a 32-key tile); four rows' chains are independent, so
// the core's adders overlap them. Each row's sums keep their order.
constexpr int32_t kRows = 4;

// s[r][j] = sum over d (in order) of a[r][d] * tile[d][j], for the kTile columns of a
// transposed tile and the kRows rows a[r]; the sums stay in registers.
template <class T>
inline void rows_times_tile(const T* const* a, const T* tile, int64_t dim, T (*s)[kTile]) {
  using V = typename Lanes<T>::type;
  constexpr int64_t kParts = kTile / Lanes<T>::count;
  V sum[kRows][kParts] = {};
  for (int64_t d = 0; d < dim; ++d) {
    V column[kParts];
    for (int64_t c = 0; c < kParts; ++c) column[c] = load_lanes(tile + d * kTile + c * Lanes<T>::count);
    for (int32_t r = 0; r < kRows; ++r) {
      const T ad = a[r][d];
      for (int64_t c = 0; c < kParts; ++c) sum[r][c] += ad * column[c];
    }
  }
  for (int32_t r = 0; r < kRows; ++r)
    for (int64_t c = 0; c < kParts; ++c) store_lanes(s[r] + c * Lanes<T>::count, sum[r][c]);
}

// The two sums below walk d one register of lanes at a time, held while the inner
// loop adds to it; a head dimension that is not a multiple of the lanes takes the same
// sums one element at a time.

// out[r][d] += sum over keys j in [lo, hi), in order, of w[r][j] * x(j)[d], for the
// kRows rows r: the rows' sums are independent chains.
template <class T, class KeyRow>
inline void add_weighted_keys(T* const* out, const T (*w)[kTile], int32_t lo, int32_t hi, KeyRow x, int64_t dim) {
  constexpr int64_t L = Lanes<T>::count;
  if (dim % L != 0) {
    for (int32_t r = 0; r < kRows; ++r)
      for (int32_t j = lo; j < hi; ++j)
        for (int64_t d = 0; d < dim; ++d) out[r][d] += w[r][j] * x(j)[d];
    return;
  }
  for (int64_t d0 = 0; d0 < dim; d0 += L) {
    typename Lanes<T>::type a[kRows];
    for (int32_t r = 0; r < kRows; ++r) a[r] = load_lanes(out[r] + d0);
    for (int32_t j = lo; j < hi; ++j) {
      const auto xj = load_lanes(x(j) + d0);
      for (int32_t r = 0; r < kRows; ++r) a[r] += w[r][j] * xj;
    }
    for (int32_t r = 0; r < kRows; ++r) store_lanes(out[r] + d0, a[r]);
  }
}

// out[d] += sum over the kRows rows r, in order, of w[r] * x[r][d].
template <class T>
inline void add_weighted_rows(T* out, const T* w, const T* const* x, int64_t dim) {
  constexpr int64_t L = Lanes<T>::count;
  if (dim % L != 0) {
    for (int32_t r = 0; r < kRows; ++r)
      for (int64_t d = 0; d < dim; ++d) out[d] += w[r] * x[r][d];
    return;
  }
  for (int64_t d0 = 0; d0 < dim; d0 += L) {
    auto a = load_lanes(out + d0);
    for (int32_t r = 0; r < kRows; ++r) a += w[r] * load_lanes(x[r] + d0);
    store_lanes(out + d0, a);
  }
}

// kRows consecutive query rows of a document against one key tile [kt, kt_end): row
// `i` of the block is position begin + i, clamped to `end - 1` past the end (a row
// that is only there to fill the block). A row is live if it is real and sees a key
// of the tile; keys [lo, hi) relative to kt are the union of what live rows see.
struct RowBlock {
  int32_t position[kRows], first[kRows], last[kRows];
  bool live[kRows];
  int32_t lo = kTile, hi = 0;

  template <class T>
  RowBlock(const Geometry<T>& g, int32_t begin, int32_t end, int32_t kt, int32_t kt_end) {
    for (int32_t r = 0; r < kRows; ++r) {
      position[r] = std::min(begin + r, end - 1);
      first[r] = std::max(kt, g.first_key(position[r]));
      last[r] = std::min(kt_end, position[r] + 1);
      live[r] = begin + r < end && first[r] < last[r];
      if (live[r]) lo = std::min(lo, first[r] - kt), hi = std::max(hi, last[r] - kt);
    }
  }
  bool any() const { return lo < hi; }
  // Row r's logits where it sees key kt + j (value(j)), -inf elsewhere.
  template <class T, class Value>
  void mask(int32_t r, int32_t kt, T* s, Value value) const {
    for (int32_t j = 0; j < kTile; ++j) {
      const bool seen = live[r] & (kt + j >= first[r]) & (kt + j < last[r]);  // & keeps it branch-free
      const T x = value(j);
      s[j] = seen ? x : -std::numeric_limits<T>::infinity();
    }
  }
};

template <class T>
AMBER_VECTOR_CLONES void forward_kernel(const Geometry<T>& g, const std::vector<Tile>& tiles, const T* q,
                                        const T* k, const T* v, const T* sinks, T* out, T* lse) {
  const int64_t H = g.heads, D = g.dim;
  const int64_t work = static_cast<int64_t>(tiles.size()) * H;
  constexpr T kMinusInf = -std::numeric_limits<T>::infinity();
#pragma omp parallel
  {
    std::vector<T> acc((kTile + kRows) * D), row_max(kTile), row_sum(kTile), keys(kTile * D);
    T s[kRows][kTile];
#pragma omp for schedule(dynamic)
    for (int64_t w = 0; w < work; ++w) {
      const Tile& tile = tiles[w / H];
      const int64_t h = w % H, kvh = h / g.group();
      const int32_t rows = tile.end - tile.begin;
      const auto key_row = [&](int32_t j) { return g.kv_row(tile.doc_start + j, kvh); };
      // The sink is a key of logit s_h seen before all others: starting the running
      // statistics at (max = s_h, sum = exp(0)) puts it in the normaliser, and its zero
      // value leaves the accumulator at zero.
      std::fill(row_max.begin(), row_max.end(), sinks ? sinks[h] : kMinusInf);
      std::fill(row_sum.begin(), row_sum.end(), T(sinks ? 1 : 0));
      std::fill(acc.begin(), acc.end(), T(0));
      for (int32_t kt = g.first_key(tile.begin) / kTile * kTile; kt < tile.end; kt += kTile) {
        const int32_t kt_end = std::min(kt + kTile, tile.end);
        transpose_tile(k, key_row, kt, kt_end - kt, D, keys.data());
        for (int32_t r0 = 0; r0 < rows; r0 += kRows) {
          const RowBlock block(g, tile.begin + r0, tile.end, kt, kt_end);
          if (!block.any()) continue;
          const T* q_rows[kRows];
          for (int32_t r = 0; r < kRows; ++r) q_rows[r] = q + g.q_row(tile.doc_start + block.position[r], h);
          rows_times_tile(q_rows, keys.data(), D, s);
          // s becomes each live row's probabilities against this tile, scaled to its new
          // running max; a row that is not live gets zeros and keeps its statistics.
          for (int32_t r = 0; r < kRows; ++r) {
            T* p = s[r];
            if (!block.live[r]) {
              std::fill_n(p, kTile, T(0));
              continue;
            }
            block.mask(r, kt, p, [&](int32_t j) { return g.scale * p[j]; });
            T &m = row_max[r0 + r], &sum = row_sum[r0 + r];
            const T new_max = std::max(m, max_of(p, kTile));
            const T rescale = exp_lanes(m - new_max);  // 0 while no key was seen
            for (int32_t j = 0; j < kTile; ++j) p[j] = exp_lanes(p[j] - new_max);
            sum = sum * rescale + fixed_order_sum(p, kTile);
            m = new_max;
            T* acc_r = acc.data() + (r0 + r) * D;
            for (int64_t d = 0; d < D; ++d) acc_r[d] *= rescale;
          }
          // Rows past the tile's end write into spare accumulator rows with zero weights.
          T* acc_rows[kRows];
          for (int32_t r = 0; r < kRows; ++r) acc_rows[r] = acc.data() + (r0 + r) * D;
          add_weighted_keys(acc_rows, s, block.lo, block.hi, [&](int32_t j) { return v + key_row(kt + j); }, D);
        }
      }
      for (int32_t r = 0; r < rows; ++r) {
        const int64_t token = tile.doc_start + tile.begin + r;
        T* o = out + g.q_row(token, h);
        for (int64_t d = 0; d < D; ++d) o[d] = acc[r * D + d] / row_sum[r];
        lse[token * H + h] = row_max[r] + std::log(row_sum[r]);
      }
    }
  }
}

// Inputs of the backward. delta[t, h] = dout . out of that row.
template <class T>
struct BackwardInputs {
  const T *q, *k, *v, *dout, *lse, *delta;
};

// dq, dk and dv, one (document, KV head) per task: the task owns the dq rows of its
// group's query heads and the dk/dv rows of its KV head, so it accumulates all three
// without atomics. Its key tiles run in order; for each, the group's query rows that
// see the tile run in order, and each row's probabilities are computed once and feed
// dv, dk (this tile) and dq (summed over the tiles).
template <class T>
AMBER_VECTOR_CLONES void backward_documents_kernel(const Geometry<T>& g, const SeqInfo& seq,
                                                   const BackwardInputs<T>& in, T* dq, T* dk, T* dv) {
  const int64_t H = g.heads, D = g.dim, group = g.group();
  const int64_t work = static_cast<int64_t>(seq.num_docs) * g.kv_heads;
#pragma omp parallel
  {
    std::vector<T> dk_acc(kTile * D), dv_acc(kTile * D), keys(kTile * D), values(kTile * D), spare_dq(kRows * D);
    T p[kRows][kTile], ds[kRows][kTile];
#pragma omp for schedule(dynamic)
    for (int64_t w = 0; w < work; ++w) {
      const int doc = static_cast<int>(w / g.kv_heads);
      const int64_t kvh = w % g.kv_heads, doc_start = seq.doc_start(doc);
      const int32_t length = seq.doc_length(doc);
      const auto key_row = [&](int32_t j) { return g.kv_row(doc_start + j, kvh); };
      for (int32_t i = 0; i < length; ++i)
        for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h)
          std::fill_n(dq + g.q_row(doc_start + i, h), D, T(0));
      for (int32_t kt = 0; kt < length; kt += kTile) {
        const int32_t kt_end = std::min(kt + kTile, length);
        transpose_tile(in.k, key_row, kt, kt_end - kt, D, keys.data());
        transpose_tile(in.v, key_row, kt, kt_end - kt, D, values.data());
        std::fill(dk_acc.begin(), dk_acc.end(), T(0));
        std::fill(dv_acc.begin(), dv_acc.end(), T(0));
        // Query i sees key j iff j <= i < j + window.
        const int32_t query_end = g.window > 0 ? std::min(length, kt_end - 1 + g.window) : length;
        for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
          for (int32_t i0 = kt; i0 < query_end; i0 += kRows) {
            const RowBlock block(g, i0, query_end, kt, kt_end);
            if (!block.any()) continue;
            const T *q_rows[kRows], *dout_rows[kRows];
            T* dq_rows[kRows];
            for (int32_t r = 0; r < kRows; ++r) {
              const int64_t row = g.q_row(doc_start + block.position[r], h);
              q_rows[r] = in.q + row, dout_rows[r] = in.dout + row;
              dq_rows[r] = i0 + r < query_end ? dq + row : spare_dq.data() + r * D;
            }
            rows_times_tile(q_rows, keys.data(), D, p);
            rows_times_tile(dout_rows, values.data(), D, ds);
            for (int32_t r = 0; r < kRows; ++r) {
              const int64_t stat = (doc_start + block.position[r]) * H + h;
              const T lse = in.lse[stat], delta = in.delta[stat];
              block.mask(r, kt, p[r], [&](int32_t j) { return g.scale * p[r][j] - lse; });
              for (int32_t j = 0; j < kTile; ++j) {
                p[r][j] = exp_lanes(p[r][j]);
                ds[r][j] = p[r][j] * (ds[r][j] - delta);
              }
            }
            // A row that is not live has zero weights: it adds exact zeros (into a spare dq
            // row if it is only filling the block).
            for (int32_t j = block.lo; j < block.hi; ++j) {
              T p_j[kRows], ds_j[kRows];
              for (int32_t r = 0; r < kRows; ++r) p_j[r] = p[r][j], ds_j[r] = ds[r][j];
              add_weighted_rows(dv_acc.data() + j * D, p_j, dout_rows, D);
              add_weighted_rows(dk_acc.data() + j * D, ds_j, q_rows, D);
            }
            add_weighted_keys(dq_rows, ds, block.lo, block.hi, [&](int32_t j) { return in.k + key_row(kt + j); }, D);
          }
        }
        for (int32_t j = kt; j < kt_end; ++j) {
          const int64_t r = (j - kt) * D;
          for (int64_t d = 0; d < D; ++d) {
            dk[key_row(j) + d] = g.scale * dk_acc[r + d];
            dv[key_row(j) + d] = dv_acc[r + d];
          }
        }
      }
      for (int32_t i = 0; i < length; ++i)
        for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h)
          for (T *x = dq + g.q_row(doc_start + i, h), *end = x + D; x < end; ++x) *x *= g.scale;
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
    forward_kernel(geometry_of<T>(q, k, options), tiles_of(seq), q_t.template data<T>(),
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
