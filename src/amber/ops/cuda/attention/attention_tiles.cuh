// What every CUDA attention kernel shares: the geometry of one call, the map from a
// block to its (document, tile), the visibility rule, and the launchers of the two
// kernel families (fp32 SIMT tiles; tensor-core mma.sync tiles for bf16/f16) and of
// the Hopper path.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "amber/core/seq_info.h"
#include "amber/core/tensor.h"
#include "amber/ops/attention.h"

namespace amber::cuda {

// Tiles start at document starts (cu_seqlens on the device). A tile plan, built on the
// device from cu_seqlens (with_tile_plan), lists every (document, k) with k counting
// the document's tiles of `tile_rows` rows; block x of a launch takes slot x (or, in the
// Hopper forward's persistent blocks, the slots of the work items it draws), and slots
// past the plan's end hold document -1 and are skipped. Nothing here reads the host's
// document lengths, so the grid depends only on the token and document counts.
//
// With short documents packed (the Hopper forward, with_tile_plan), "documents" here
// are segments: cu_seqlens holds segment bounds, a segment being one document or a run
// of consecutive documents of fewer than pack_rows tokens together, so a tile of
// pack_rows rows holds several short documents instead of one. doc_starts[t] is then
// the first token of token t's own document, written for every document shorter than
// pack_rows; a segment of several documents reads its rows' starts there.
struct Layout {
  const int32_t* cu_seqlens;
  int num_docs;  // or segments: an upper bound, the ones past the last hold no tokens
  int64_t tokens;
  int heads, kv_heads, window;
  float scale;
  const int2* tiles = nullptr;  // [tile_slots] (document, k) or (-1, 0)
  int tile_rows = 0, tile_slots = 0;
  const int32_t* doc_starts = nullptr;  // [tokens] when packed
  int pack_rows = 0;
};

struct TileRange {
  int64_t doc_start;
  int length, begin, rows;  // rows = tile rows that exist (<= the tile size)
};

// Tile k (from the document's start) of `rows` rows of document doc.
__device__ __forceinline__ TileRange tile_range(const Layout& g, int doc, int k, int rows) {
  TileRange t;
  t.doc_start = g.cu_seqlens[doc];
  t.length = g.cu_seqlens[doc + 1] - g.cu_seqlens[doc];
  t.begin = k * rows;
  t.rows = min(rows, t.length - t.begin);
  return t;
}

// The (document, tile) of plan slot slot_index (of this block's slot, blockIdx.x, by
// default). The plan lists a document's tiles in order; with
// last_first, k counts from the document's end: under a causal mask the last query
// tile has the most keys, and starting the longest blocks first shortens the tail of
// the grid.
__device__ __forceinline__ bool tile_of(const Layout& g, int slot_index, bool last_first, TileRange& t) {
  const int2 slot = g.tiles[slot_index];
  if (slot.x < 0) return false;
  const int tiles = (g.cu_seqlens[slot.x + 1] - g.cu_seqlens[slot.x] + g.tile_rows - 1) / g.tile_rows;
  t = tile_range(g, slot.x, last_first ? tiles - 1 - slot.y : slot.y, g.tile_rows);
  return true;
}
__device__ __forceinline__ bool tile_of(const Layout& g, bool last_first, TileRange& t) {
  return tile_of(g, static_cast<int>(blockIdx.x), last_first, t);
}

// Whether t's segment holds several documents (its last token's document starts past
// the segment's start), whose rows then see only their own document's keys. A short
// document alone in its segment is not packed: its tiles run as any document's.
__device__ __forceinline__ bool packed(const Layout& g, const TileRange& t) {
  return g.doc_starts != nullptr && t.length < g.pack_rows && g.doc_starts[t.doc_start + t.length - 1] > t.doc_start;
}

// The first row of the document of row `row` of t's segment (clamped to the segment's
// rows), relative to the segment; only for a packed segment (packed(g, t)), the one
// kind whose rows' documents differ.
__device__ __forceinline__ int document_start(const Layout& g, const TileRange& t, int row) {
  return g.doc_starts[t.doc_start + min(row, t.length - 1)] - static_cast<int>(t.doc_start);
}

// Query i sees key j of its document iff j <= i and (no window or j > i - window).
__device__ __forceinline__ bool visible(int i, int j, int window) {
  return j <= i && (window == 0 || j > i - window);
}

__device__ __forceinline__ int first_key(int i, int window) {
  return window > 0 ? max(0, i - window + 1) : 0;
}

// The forward kernels' pointers, in either family.
template <class T>
struct ForwardArgs {
  const T *q, *k, *v;
  const float* sinks;  // [heads] or null
  T* out;
  float* lse;
};

// g with a plan of `rows`-row tiles, built on `device` (one small kernel, no host
// synchronisation) by the first call for g's layout and kept in `plans` for the calls
// after it; with `pack`, over segments that pack documents of fewer than `rows` tokens
// (see Layout), cut by the same kernel.
Layout with_tile_plan(const Layout& g, int rows, bool pack, Device device, DerivedTensors& plans, const char* op);

// Which of a document's key tiles are grouped work items (see WorkList), counted from
// the document's end: the last `least`, or the last share_quarters / 4 of its tiles (at
// most `most`) when that is more.
struct GroupedTiles {
  int least = 0, share_quarters = 0, most = 0;
  __host__ __device__ int of(int tiles) const {
    const int share = tiles * share_quarters / 4 < most ? tiles * share_quarters / 4 : most;
    const int grouped = share > least ? share : least;
    return grouped < tiles ? grouped : tiles;
  }
};

// The work items of a backward whose blocks own key tiles and stream query heads,
// drawn in order by persistent blocks: (document, tile k from the document's start,
// first query head, head count), or document -1 past the last item. A grouped tile
// (`rule`; near its document's end, where each head streams few queries) is one item
// taking all the query heads of a KV head; each other tile is one item per head. Order
// keeps the backward's ordered
// sums waiting only on items drawn earlier: with last_first (sums of dQ over key
// tiles, the diagonal tile first) a document's tiles come last first, and the grouped
// items before the per-head ones; the per-head items are heads major, in
// member-major order (member m of every KV head before member m + 1: the sums of dK
// and dV over the query heads of a KV head go in member order).
struct WorkList {
  const int4* items;
  int capacity;
};
// Built, like a tile plan, once per layout and kept in `plans`.
WorkList with_work_list(const Layout& g, int rows, GroupedTiles rule, bool last_first, Device device,
                        DerivedTensors& plans, const char* op);

// The plan's slots by `heads`, checked against the grid limits.
dim3 attention_grid(const Layout& g, int heads, const char* op);

// The two kernel families. Tensors are validated by the entry points; sinks is f32 on
// the device or null; delta [T, H] f32 = rowwise dout . out.
// The sinks as f32 on the device (they may be f32, bf16 or f16, like a master copy);
// undefined stays undefined.
Tensor sinks_f32(const Tensor& sinks, const char* op);

namespace simt {
void forward(const Tensor& q, const Tensor& k, const Tensor& v, const Layout& g,
             DerivedTensors& plans, const float* sinks, Tensor& out, Tensor& lse);
void backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
              const Tensor& lse, const Tensor& delta, const Layout& g, DerivedTensors& plans,
              Tensor& dq, Tensor& dk, Tensor& dv);
}  // namespace simt

namespace tensor_core {
bool supports(DType dtype, int64_t head_dim);
void forward(const Tensor& q, const Tensor& k, const Tensor& v, const Layout& g,
             DerivedTensors& plans, const float* sinks, Tensor& out, Tensor& lse);
void backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
              const Tensor& lse, const Tensor& delta, const Layout& g, DerivedTensors& plans,
              Tensor& dq, Tensor& dk, Tensor& dv);
}  // namespace tensor_core

// The Hopper path (sm_90a builds, on a q whose device has compute capability 9): TMA
// and wgmma.
namespace hopper {
bool supports(const Tensor& q);
void forward(const Tensor& q, const Tensor& k, const Tensor& v, const Layout& g,
             DerivedTensors& plans, const float* sinks, Tensor& out, Tensor& lse);
// Runs `then` (if given) too where its q side can read dQ's f32 sum, leaving dq
// unwritten; returns whether it did.
bool backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
              const Tensor& lse, const Tensor& delta, const Layout& g, DerivedTensors& plans,
              Tensor& dq, Tensor& dk, Tensor& dv, const QkNormRopeGrad* then);
}  // namespace hopper

}  // namespace amber::cuda
