// The CUDA attention entry points: they check the geometry, widen the sinks, compute
// the backward's row statistic delta and the sink gradient, and hand the tiles to the
// Hopper kernels (sm_90a on compute capability 9), the portable tensor-core kernels
// (bf16/f16, head_dim 64 and 128) or the fp32 SIMT kernels.
#include <cmath>
#include <string>

#include "amber/core/stream.h"
#include "amber/ops/cuda/attention/attention.h"
#include "amber/ops/cuda/attention/attention_tiles.cuh"
#include "amber/ops/cuda/common/common.cuh"
#include "amber/ops/cuda/rope/rope.h"

namespace amber::cuda {

namespace {

constexpr int kPlanThreads = 1024;

// Exclusive prefix sum of one value per thread over the block (1024 threads); *total
// receives the sum of all. Calls may follow one another: the first barrier keeps this
// call's writes behind the previous call's reads.
__device__ int block_exclusive_scan(int value, int* total) {
  __shared__ int warp_sums[kPlanThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();
  int inclusive = value;
  for (int o = 1; o < 32; o <<= 1) {
    const int up = __shfl_up_sync(0xffffffffu, inclusive, o);
    if (lane >= o) inclusive += up;
  }
  if (lane == 31) warp_sums[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    int w = warp_sums[lane];
    for (int o = 1; o < 32; o <<= 1) {
      const int up = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += up;
    }
    warp_sums[lane] = w;  // inclusive over warps
  }
  __syncthreads();
  *total = warp_sums[kPlanThreads / 32 - 1];
  return inclusive - value + (warp > 0 ? warp_sums[warp - 1] : 0);
}

// A thread's run of documents in a one-block planning kernel: the documents split
// evenly over the threads, at least `least` to a run.
struct DocumentRun {
  int lo, hi;
  __device__ explicit DocumentRun(int num_docs, int least = 1) {
    const int per = max(least, (num_docs + kPlanThreads - 1) / kPlanThreads);
    lo = min(num_docs, static_cast<int>(threadIdx.x) * per);
    hi = min(num_docs, lo + per);
  }
};

// Documents per thread when packing: next fit over a thread's run, so a run's end also
// ends a segment (one extra segment per 16 documents at most).
constexpr int kPackRun = 16;

// Cuts the documents into segments for `rows`-row tiles (see Layout): a document of
// rows tokens or more is a segment of its own; consecutive shorter ones share a segment
// while their lengths sum to less than rows (next fit within a thread's run of
// documents). Writes the segments' bounds into segments[0 .. num_docs] (the entries
// past the last segment hold the token count: empty segments) and the first token of
// every document shorter than rows for each of its tokens into doc_starts; the block
// meets before returning.
__device__ void pack_documents(const int32_t* cu_seqlens, int num_docs, int rows, int32_t* segments,
                               int32_t* doc_starts) {
  const DocumentRun run(num_docs, kPackRun);
  const int lo = run.lo, hi = run.hi;
  // fill: tokens in the open segment, rows when none is open (after a long one).
  const auto walk = [&](auto&& start_segment) {
    for (int d = lo, fill = rows; d < hi; ++d) {
      const int length = cu_seqlens[d + 1] - cu_seqlens[d];
      if (fill + length < rows) {
        fill += length;
      } else {
        start_segment(d);
        fill = min(length, rows);
      }
    }
  };
  int mine = 0;
  walk([&](int) { ++mine; });
  int total = 0;
  int at = block_exclusive_scan(mine, &total);
  walk([&](int d) { segments[at++] = cu_seqlens[d]; });
  for (int i = total + threadIdx.x; i <= num_docs; i += kPlanThreads) segments[i] = cu_seqlens[num_docs];
  for (int d = threadIdx.x; d < num_docs; d += kPlanThreads) {
    const int start = cu_seqlens[d], end = cu_seqlens[d + 1];
    if (end - start < rows)
      for (int t = start; t < end; ++t) doc_starts[t] = start;
  }
  __syncthreads();
}

// How many `rows`-row tiles document d takes.
__device__ __forceinline__ int tiles_of(const int32_t* cu_seqlens, int d, int rows) {
  return (cu_seqlens[d + 1] - cu_seqlens[d] + rows - 1) / rows;
}

// One block: each thread takes a run of documents, counts their tiles, finds its
// offset by a block scan and writes (document, k) for each; the rest of the slots get
// document -1. With segments, the documents are first packed into them
// (pack_documents) and the plan is over the segments.
__global__ void __launch_bounds__(kPlanThreads) tile_plan_kernel(const int32_t* documents, int num_docs, int rows,
                                                                 int32_t* segments, int32_t* doc_starts, int slots,
                                                                 int2* plan) {
  if (segments) pack_documents(documents, num_docs, rows, segments, doc_starts);
  const int32_t* cu_seqlens = segments ? segments : documents;
  const DocumentRun run(num_docs);
  const int lo = run.lo, hi = run.hi;
  const auto tiles = [&](int d) { return tiles_of(cu_seqlens, d, rows); };
  int mine = 0;
  for (int d = lo; d < hi; ++d) mine += tiles(d);
  int total = 0;
  int at = block_exclusive_scan(mine, &total);
  for (int d = lo; d < hi; ++d)
    for (int k = 0, n = tiles(d); k < n; ++k) plan[at++] = make_int2(d, k);
  for (int i = total + threadIdx.x; i < slots; i += kPlanThreads) plan[i] = make_int2(-1, 0);
}

// One block writes the work items of a backward over `rows`-row key tiles (see
// WorkList): grouped items first (buckets of documents by how many of their tiles are
// grouped, most first; each document's last tile first) when last_first, per-head
// items (heads major in member-major order, documents in order, each document's tiles
// last first or first first) after them; the other way round otherwise. The rest of the capacity gets
// document -1.
__global__ void __launch_bounds__(kPlanThreads)
    work_list_kernel(const int32_t* cu_seqlens, int num_docs, int rows, int heads, int kv_heads, GroupedTiles rule,
                     bool last_first, int capacity, int4* items) {
  __shared__ int most_grouped;
  const DocumentRun run(num_docs);
  const int lo = run.lo, hi = run.hi, group = heads / kv_heads;
  const auto grouped_of = [&](int d) { return rule.of(tiles_of(cu_seqlens, d, rows)); };
  if (threadIdx.x == 0) most_grouped = 0;
  __syncthreads();
  int mine_most = 0;
  for (int d = lo; d < hi; ++d) mine_most = max(mine_most, grouped_of(d));
  atomicMax(&most_grouped, mine_most);
  __syncthreads();
  int at = 0;
  const auto grouped_items = [&] {
    for (int bucket = most_grouped; bucket >= 1; --bucket) {
      int mine = 0;
      for (int d = lo; d < hi; ++d) mine += grouped_of(d) == bucket ? bucket : 0;
      int total = 0;
      int i = at + kv_heads * block_exclusive_scan(mine, &total);
      for (int d = lo; d < hi; ++d) {
        if (grouped_of(d) != bucket) continue;
        const int n = tiles_of(cu_seqlens, d, rows);
        for (int r = 1; r <= bucket; ++r)
          for (int kvh = 0; kvh < kv_heads; ++kvh) items[i++] = make_int4(d, n - r, kvh * group, group);
      }
      at += kv_heads * total;
    }
  };
  const auto per_head_items = [&] {
    int mine = 0;
    for (int d = lo; d < hi; ++d) mine += tiles_of(cu_seqlens, d, rows) - grouped_of(d);
    int total = 0;
    const int offset = block_exclusive_scan(mine, &total);
    // Heads in member-major order (member m of every KV head before member m + 1), so
    // the items that add one tile's dK and dV one after another are kv_heads runs
    // apart, not one: a member seldom finds the one before it still running.
    for (int p = 0; p < heads; ++p) {
      const int h = p % kv_heads * group + p / kv_heads;
      int i = at + p * total + offset;
      for (int d = lo; d < hi; ++d)
        for (int k = 0, n = tiles_of(cu_seqlens, d, rows) - grouped_of(d); k < n; ++k)
          items[i++] = make_int4(d, last_first ? n - 1 - k : k, h, 1);
    }
    at += heads * total;
  };
  if (last_first) {
    grouped_items();
    per_head_items();
  } else {
    per_head_items();
    grouped_items();
  }
  for (int i = at + threadIdx.x; i < capacity; i += kPlanThreads) items[i] = make_int4(-1, 0, 0, 0);
}

}  // namespace

WorkList with_work_list(const Layout& g, int rows, GroupedTiles rule, bool last_first, Device device,
                        DerivedTensors& plans, const char* op) {
  // Without GQA a "group" is one head: nothing to share.
  if (g.heads == g.kv_heads) rule = GroupedTiles{};
  // Every item covers at least one (tile, head); every document's last tile may be
  // partial.
  const int64_t capacity = ((g.tokens + rows - 1) / rows + g.num_docs) * g.heads;
  AMBER_CHECK(capacity < (int64_t{1} << 31), op, ": ", g.tokens, " tokens in ", g.num_docs, " documents x ", g.heads,
              " heads exceed the work items a launch can count");
  const std::string key = "attention work list: rows " + std::to_string(rows) + ", heads " +
                          std::to_string(g.heads) + "/" + std::to_string(g.kv_heads) + ", grouped " +
                          std::to_string(rule.least) + "/" + std::to_string(rule.share_quarters) + "/" +
                          std::to_string(rule.most) + (last_first ? ", last first" : "");
  const Tensor* items = plans.find(key);
  if (!items) {
    items = &plans.keep(key, Tensor::empty({capacity, 4}, DType::i32, device));
    work_list_kernel<<<1, kPlanThreads, 0, current_stream()>>>(
        g.cu_seqlens, g.num_docs, rows, g.heads, g.kv_heads, rule, last_first, static_cast<int>(capacity),
        static_cast<int4*>(items->raw()));
    check_launch(op, items->shape());
  }
  return WorkList{static_cast<const int4*>(items->raw()), static_cast<int>(capacity)};
}

Layout with_tile_plan(const Layout& g, int rows, bool pack, Device device, DerivedTensors& plans, const char* op) {
  // Every document's last tile may be partial: at most tokens / rows full tiles plus
  // one per document.
  const int64_t slots = (g.tokens + rows - 1) / rows + g.num_docs;
  AMBER_CHECK(slots < (int64_t{1} << 31), op, ": ", g.tokens, " tokens in ", g.num_docs,
              " documents exceed the launch grid");
  // The slots, then when packing the documents' starts by token and the segments
  // (num_docs + 1).
  const int64_t slot_words = 2 * slots;
  const std::string key = "attention tile plan: rows " + std::to_string(rows) + (pack ? ", packed" : "");
  const Tensor* storage = plans.find(key);
  const bool made = storage != nullptr;
  if (!made) {
    const int64_t count = slot_words + (pack ? g.tokens + g.num_docs + 1 : 0);
    storage = &plans.keep(key, Tensor::empty({count}, DType::i32, device));
  }
  int32_t* words = static_cast<int32_t*>(storage->raw());
  Layout planned = g;
  planned.tiles = reinterpret_cast<const int2*>(words);
  planned.tile_rows = rows;
  planned.tile_slots = static_cast<int>(slots);
  int32_t *segments = nullptr, *doc_starts = nullptr;
  if (pack) {
    doc_starts = words + slot_words;
    segments = doc_starts + g.tokens;
    planned.cu_seqlens = segments;
    planned.doc_starts = doc_starts;
    planned.pack_rows = rows;
  }
  if (made) return planned;
  tile_plan_kernel<<<1, kPlanThreads, 0, current_stream()>>>(g.cu_seqlens, g.num_docs, rows, segments, doc_starts,
                                                                planned.tile_slots, reinterpret_cast<int2*>(words));
  check_launch(op, storage->shape());
  return planned;
}

dim3 attention_grid(const Layout& g, int heads, const char* op) {
  AMBER_CHECK(heads <= 65535, op, ": ", heads, " heads exceed the launch grid");
  return dim3(static_cast<unsigned>(g.tile_slots), static_cast<unsigned>(heads));
}

namespace {

constexpr int kThreads = 256;

// delta[t, h] = dout . out of that row, fp32. A group of `lanes` lanes (a power of two,
// at most 32) takes a row, each lane kVec consecutive elements per load: at head_dim 64
// a row is 128 bytes, which one lane per element read 2 bytes at a time.
template <class T, int kVec>
__global__ void delta_kernel(const T* dout, const T* out, int64_t rows, int dim, int lanes, float* delta) {
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t row = thread / lanes;
  const int sub = static_cast<int>(thread % lanes);
  float s = 0.0f;
  if (row < rows)
    for (int d = sub * kVec; d < dim; d += lanes * kVec) {
      float a[kVec], b[kVec];
      load_f32<T, kVec>(dout + row * dim + d, a);
      load_f32<T, kVec>(out + row * dim + d, b);
#pragma unroll
      for (int e = 0; e < kVec; ++e) s = fmaf(a[e], b[e], s);
    }
  for (int o = lanes / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (row < rows && sub == 0) delta[row] = s;
}

// Launches delta_kernel with 16-byte loads when every row allows them.
template <class T>
void row_deltas(const T* dout, const T* out, int64_t rows, int dim, float* delta) {
  constexpr int kWide = 16 / sizeof(T);
  const bool wide = dim % kWide == 0 && aligned16(dout) && aligned16(out);
  const int loads = wide ? dim / kWide : dim;
  int lanes = 1;
  while (lanes < 32 && 2 * lanes <= loads) lanes *= 2;
  const unsigned blocks = static_cast<unsigned>((rows * lanes + kThreads - 1) / kThreads);
  if (wide)
    delta_kernel<T, kWide><<<blocks, kThreads, 0, current_stream()>>>(dout, out, rows, dim, lanes, delta);
  else
    delta_kernel<T, 1><<<blocks, kThreads, 0, current_stream()>>>(dout, out, rows, dim, lanes, delta);
}

// partial[h] = -sum over tokens of exp(sink_h - lse[t, h]) * delta[t, h]: a sink moves
// only the normaliser (d lse / d s_h = P_sink, d loss / d lse = -delta). One block per
// head with a fixed thread-to-token map and a fixed reduction tree: deterministic.
__global__ void dsinks_kernel(const float* sinks, const float* lse, const float* delta,
                              int64_t tokens, int heads, float* partial) {
  __shared__ float scratch[32];
  const int h = blockIdx.x;
  float s = 0.0f;
  for (int64_t t = threadIdx.x; t < tokens; t += blockDim.x)
    s -= expf(sinks[h] - lse[t * heads + h]) * delta[t * heads + h];
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) partial[h] = s;
}

template <class S>
__global__ void widen_kernel(const S* in, int n, float* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = to_f32(in[i]);
}

Layout layout_of(const Tensor& q, const Tensor& k, const SeqInfo& seq, const AttentionOptions& options) {
  return {static_cast<const int32_t*>(seq.cu_seqlens.raw()), seq.num_docs, seq.total_tokens,
          static_cast<int>(q.size(1)), static_cast<int>(k.size(1)), options.window,
          static_cast<float>(options.softmax_scale)};
}

const float* f32_or_null(const Tensor& t) {
  return t.defined() ? static_cast<const float*>(t.raw()) : nullptr;
}

}  // namespace

Tensor sinks_f32(const Tensor& sinks, const char* op) {
  if (!sinks.defined() || sinks.dtype() == DType::f32) return sinks;
  Tensor out = Tensor::empty(sinks.shape(), DType::f32, sinks.device());
  const int n = static_cast<int>(sinks.numel());
  with_element_type(sinks.dtype(), op, [&](auto tag) {
    using S = decltype(tag);
    widen_kernel<S><<<(n + 255) / 256, 256, 0, current_stream()>>>(
        static_cast<const S*>(sinks.raw()), n, static_cast<float*>(out.raw()));
  });
  check_launch(op, sinks.shape());
  return out;
}

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const SeqInfo& seq,
                       const AttentionOptions& options, const Tensor& sinks, Tensor& out,
                       Tensor& lse) {
  const char* op = "attention_forward";
  if (seq.total_tokens == 0) return;
  const Layout g = layout_of(q, k, seq, options);
  const Tensor sinks32 = sinks_f32(sinks, op);
  if (!options.portable_kernels && hopper::supports(q))
    hopper::forward(q, k, v, g, seq.derived, f32_or_null(sinks32), out, lse);
  else if (tensor_core::supports(q.dtype(), q.size(2)))
    tensor_core::forward(q, k, v, g, seq.derived, f32_or_null(sinks32), out, lse);
  else
    simt::forward(q, k, v, g, seq.derived, f32_or_null(sinks32), out, lse);
}

void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out, const Tensor& lse, const SeqInfo& seq,
                        const AttentionOptions& options, const Tensor& sinks, Tensor& dq,
                        Tensor& dk, Tensor& dv, Tensor& dsinks, const QkNormRopeGrad* then) {
  const char* op = "attention_backward";
  if (seq.total_tokens == 0) return;
  const Layout g = layout_of(q, k, seq, options);
  const int64_t rows = seq.total_tokens * g.heads;
  Tensor delta = Tensor::empty({seq.total_tokens, g.heads}, DType::f32, q.device());
  with_element_type(q.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    row_deltas<T>(static_cast<const T*>(dout.raw()), static_cast<const T*>(out.raw()), rows,
                  static_cast<int>(q.size(2)), static_cast<float*>(delta.raw()));
  });
  check_launch(op, q.shape());
  bool then_done = false;
  if (!options.portable_kernels && hopper::supports(q))
    then_done = hopper::backward(dout, q, k, v, lse, delta, g, seq.derived, dq, dk, dv, then);
  else if (tensor_core::supports(q.dtype(), q.size(2)))
    tensor_core::backward(dout, q, k, v, lse, delta, g, seq.derived, dq, dk, dv);
  else
    simt::backward(dout, q, k, v, lse, delta, g, seq.derived, dq, dk, dv);
  if (then && !then_done) cuda::qk_norm_rope_backward(then->q, then->k, then->positions, *then->table);
  if (!sinks.defined()) return;
  const Tensor sinks32 = sinks_f32(sinks, op);
  Tensor partial = Tensor::empty({1, g.heads}, DType::f32, q.device());
  dsinks_kernel<<<static_cast<unsigned>(g.heads), kThreads, 0, current_stream()>>>(
      f32_or_null(sinks32), static_cast<const float*>(lse.raw()),
      static_cast<const float*>(delta.raw()), seq.total_tokens, g.heads,
      static_cast<float*>(partial.raw()));
  check_launch(op, sinks.shape());
  add_column_sums(partial, dsinks, op);
}

}  // namespace amber::cuda
