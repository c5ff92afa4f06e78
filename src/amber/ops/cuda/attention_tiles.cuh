// What every CUDA attention kernel shares: the geometry of one call, the map from a
// block to its (document, tile), the visibility rule, and the launchers of the two
// kernel families (fp32 SIMT tiles; tensor-core mma.sync tiles for bf16/f16) and of
// the Hopper path.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "amber/core/tensor.h"

namespace amber::cuda {

// Tiles start at document starts (cu_seqlens on the device). grid.x enumerates
// (document, tile) slots with ceil(max_seqlen / rows) tiles per document; slots past a
// document's end exit at once.
struct Layout {
  const int32_t* cu_seqlens;
  int num_docs, max_seqlen, heads, kv_heads, window;
  float scale;
};

struct TileRange {
  int64_t doc_start;
  int length, begin, rows;  // rows = tile rows that exist (<= the tile size)
};

__host__ __device__ inline int tiles_per_doc(const Layout& g, int rows) {
  return (g.max_seqlen + rows - 1) / rows;
}

// The (document, tile) of this block. With last_first, a document's tiles run from its
// end: under a causal mask the last query tile has the most keys, and starting the
// longest blocks first shortens the tail of the grid.
__device__ __forceinline__ bool tile_of(const Layout& g, int rows, bool last_first, TileRange& t) {
  const int per_doc = tiles_per_doc(g, rows);
  const int doc = blockIdx.x / per_doc, index = blockIdx.x % per_doc;
  t.doc_start = g.cu_seqlens[doc];
  t.length = g.cu_seqlens[doc + 1] - g.cu_seqlens[doc];
  const int tiles = (t.length + rows - 1) / rows;
  if (index >= tiles) return false;
  t.begin = (last_first ? tiles - 1 - index : index) * rows;
  t.rows = min(rows, t.length - t.begin);
  return true;
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

// Blocks of (document, tile) slots by `heads`, checked against the grid limits.
dim3 attention_grid(const Layout& g, int rows, int heads, const char* op);

// Raises a kernel's dynamic shared-memory limit (a host-side attribute, no sync).
void allow_smem(const void* kernel, size_t bytes, const char* op);

// The two kernel families. Tensors are validated by the entry points; sinks is f32 on
// the device or null; delta [T, H] f32 = rowwise dout . out.
namespace simt {
void forward(const Tensor& q, const Tensor& k, const Tensor& v, const Layout& g,
             const float* sinks, Tensor& out, Tensor& lse);
void backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
              const Tensor& lse, const Tensor& delta, const Layout& g, Tensor& dq, Tensor& dk,
              Tensor& dv);
}  // namespace simt

namespace tensor_core {
bool supports(DType dtype, int64_t head_dim);
void forward(const Tensor& q, const Tensor& k, const Tensor& v, const Layout& g,
             const float* sinks, Tensor& out, Tensor& lse);
void backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
              const Tensor& lse, const Tensor& delta, const Layout& g, Tensor& dq, Tensor& dk,
              Tensor& dv);
}  // namespace tensor_core

// The Hopper path (sm_90a builds on a compute capability 9 device): TMA and wgmma.
namespace hopper {
bool supports(const Tensor& q);
void forward(const Tensor& q, const Tensor& k, const Tensor& v, const Layout& g,
             const float* sinks, Tensor& out, Tensor& lse);
void backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
              const Tensor& lse, const Tensor& delta, const Layout& g, Tensor& dq, Tensor& dk,
              Tensor& dv);
}  // namespace hopper

}  // namespace amber::cuda
