// CPU attention over packed documents: a flash-style forward (query tiles walk key
// tiles with an online softmax, never a T x T matrix) and a deterministic backward
// that recomputes the probabilities from the saved log-sum-exp. The oracle for GPU kernels.
#include "amber/ops/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "amber/ops/cpu/dispatch.h"

namespace amber::cpu {
namespace {

// Rows per query tile and keys per key tile. A 32 x 64 float key tile is 8 KiB, so it
// stays in L1 while every row of the query tile reads it.
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

// Sums in a fixed order, so every row's result is fixed by its inputs alone (thread
// count and memory alignment do not enter). Eight running sums, one per d mod 8, then
// added pairwise: a single running sum waits on each add in turn, and the compiler may
// not reorder it into vector lanes.
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

template <class T>
void forward_kernel(const Geometry<T>& g, const std::vector<Tile>& tiles, const T* q, const T* k,
                    const T* v, const T* sinks, T* out, T* lse) {
  const int64_t H = g.heads, D = g.dim;
  const int64_t work = static_cast<int64_t>(tiles.size()) * H;
#pragma omp parallel
  {
    std::vector<T> acc(kTile * D), row_max(kTile), row_sum(kTile), score(kTile);
#pragma omp for schedule(dynamic)
    for (int64_t w = 0; w < work; ++w) {
      const Tile& tile = tiles[w / H];
      const int64_t h = w % H, kvh = h / g.group();
      const int32_t rows = tile.end - tile.begin;
      // The sink is a key of logit s_h seen before all others: starting the running
      // statistics at (max = s_h, sum = exp(0)) puts it in the normaliser, and its zero
      // value leaves the accumulator at zero.
      std::fill(row_max.begin(), row_max.end(),
                sinks ? sinks[h] : -std::numeric_limits<T>::infinity());
      std::fill(row_sum.begin(), row_sum.end(), T(sinks ? 1 : 0));
      std::fill(acc.begin(), acc.end(), T(0));
      for (int32_t kt = g.first_key(tile.begin) / kTile * kTile; kt < tile.end; kt += kTile) {
        const int32_t kt_end = std::min(kt + kTile, tile.end);
        for (int32_t r = 0; r < rows; ++r) {
          const int32_t i = tile.begin + r;
          const int32_t first = std::max(kt, g.first_key(i)), last = std::min(kt_end, i + 1);
          if (first >= last) continue;
          const T* qi = q + g.q_row(tile.doc_start + i, h);
          T tile_max = -std::numeric_limits<T>::infinity();
          for (int32_t j = first; j < last; ++j) {
            score[j - first] = g.scale * dot(qi, k + g.kv_row(tile.doc_start + j, kvh), D);
            tile_max = std::max(tile_max, score[j - first]);
          }
          const T new_max = std::max(row_max[r], tile_max);
          const T rescale = std::exp(row_max[r] - new_max);  // 0 while no key was seen
          T* acc_r = acc.data() + r * D;
          for (int64_t d = 0; d < D; ++d) acc_r[d] *= rescale;
          T tile_sum = 0;
          for (int32_t j = first; j < last; ++j) {
            const T p = std::exp(score[j - first] - new_max);
            tile_sum += p;
            const T* vj = v + g.kv_row(tile.doc_start + j, kvh);
            for (int64_t d = 0; d < D; ++d) acc_r[d] += p * vj[d];
          }
          row_sum[r] = row_sum[r] * rescale + tile_sum;
          row_max[r] = new_max;
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

// Inputs of the backward kernels. delta[t, h] = dout . out of that row.
template <class T>
struct BackwardInputs {
  const T *q, *k, *v, *dout, *lse, *delta;
};

// dq = scale * sum_j dS_ij k_j, one (query tile, head) per task: each task owns its rows.
template <class T>
void backward_dq_kernel(const Geometry<T>& g, const std::vector<Tile>& tiles,
                        const BackwardInputs<T>& in, T* dq) {
  const int64_t H = g.heads, D = g.dim;
  const int64_t work = static_cast<int64_t>(tiles.size()) * H;
#pragma omp parallel
  {
    std::vector<T> acc(kTile * D);
#pragma omp for schedule(dynamic)
    for (int64_t w = 0; w < work; ++w) {
      const Tile& tile = tiles[w / H];
      const int64_t h = w % H, kvh = h / g.group();
      std::fill(acc.begin(), acc.end(), T(0));
      for (int32_t kt = g.first_key(tile.begin) / kTile * kTile; kt < tile.end; kt += kTile) {
        const int32_t kt_end = std::min(kt + kTile, tile.end);
        for (int32_t i = tile.begin; i < tile.end; ++i) {
          const int32_t first = std::max(kt, g.first_key(i)), last = std::min(kt_end, i + 1);
          const int64_t row = g.q_row(tile.doc_start + i, h);
          const int64_t stat = (tile.doc_start + i) * H + h;
          T* acc_r = acc.data() + (i - tile.begin) * D;
          for (int32_t j = first; j < last; ++j) {
            const T* kj = in.k + g.kv_row(tile.doc_start + j, kvh);
            const T* vj = in.v + g.kv_row(tile.doc_start + j, kvh);
            const T p = std::exp(g.scale * dot(in.q + row, kj, D) - in.lse[stat]);
            const T ds = p * (dot(in.dout + row, vj, D) - in.delta[stat]);
            for (int64_t d = 0; d < D; ++d) acc_r[d] += ds * kj[d];
          }
        }
      }
      for (int32_t i = tile.begin; i < tile.end; ++i) {
        T* out = dq + g.q_row(tile.doc_start + i, h);
        const T* acc_r = acc.data() + (i - tile.begin) * D;
        for (int64_t d = 0; d < D; ++d) out[d] = g.scale * acc_r[d];
      }
    }
  }
}

// dk and dv, one (key tile, KV head) per task. The task walks the query heads of its
// group and their rows in a fixed order, so the GQA sum needs no atomics and its
// rounding does not depend on scheduling; the price is recomputing P a second time.
template <class T>
void backward_dkdv_kernel(const Geometry<T>& g, const std::vector<Tile>& tiles,
                          const BackwardInputs<T>& in, T* dk, T* dv) {
  const int64_t H = g.heads, D = g.dim, group = g.group();
  const int64_t work = static_cast<int64_t>(tiles.size()) * g.kv_heads;
#pragma omp parallel
  {
    std::vector<T> dk_acc(kTile * D), dv_acc(kTile * D);
#pragma omp for schedule(dynamic)
    for (int64_t w = 0; w < work; ++w) {
      const Tile& tile = tiles[w / g.kv_heads];
      const int64_t kvh = w % g.kv_heads;
      std::fill(dk_acc.begin(), dk_acc.end(), T(0));
      std::fill(dv_acc.begin(), dv_acc.end(), T(0));
      // Query i sees key j iff j <= i < j + window.
      const int32_t query_end =
          g.window > 0 ? std::min(tile.doc_length, tile.end - 1 + g.window) : tile.doc_length;
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        for (int32_t i = tile.begin; i < query_end; ++i) {
          const int32_t first = std::max(tile.begin, g.first_key(i));
          const int32_t last = std::min(tile.end, i + 1);
          const int64_t row = g.q_row(tile.doc_start + i, h);
          const int64_t stat = (tile.doc_start + i) * H + h;
          const T* qi = in.q + row;
          const T* doi = in.dout + row;
          for (int32_t j = first; j < last; ++j) {
            const T* kj = in.k + g.kv_row(tile.doc_start + j, kvh);
            const T* vj = in.v + g.kv_row(tile.doc_start + j, kvh);
            const T p = std::exp(g.scale * dot(qi, kj, D) - in.lse[stat]);
            const T ds = p * (dot(doi, vj, D) - in.delta[stat]);
            T* dk_j = dk_acc.data() + (j - tile.begin) * D;
            T* dv_j = dv_acc.data() + (j - tile.begin) * D;
            for (int64_t d = 0; d < D; ++d) {
              dv_j[d] += p * doi[d];
              dk_j[d] += ds * qi[d];
            }
          }
        }
      }
      for (int32_t j = tile.begin; j < tile.end; ++j) {
        const int64_t row = g.kv_row(tile.doc_start + j, kvh);
        const int64_t r = (j - tile.begin) * D;
        for (int64_t d = 0; d < D; ++d) {
          dk[row + d] = g.scale * dk_acc[r + d];
          dv[row + d] = dv_acc[r + d];
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
  const std::vector<Tile> tiles = tiles_of(seq);
  backward_dq_kernel(g, tiles, in, dq);
  backward_dkdv_kernel(g, tiles, in, dk, dv);
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
