// CUDA RoPE (rotate-half, partial rotary pass-through). Each block forms its tokens'
// cos/sin rows in double from integer positions, exactly as the CPU does, rounds them
// to float in shared memory, and rotates every head of its tokens in 16-byte pieces;
// y may alias x (each thread reads its elements before writing them).
#include "amber/core/stream.h"
#include "amber/ops/cuda/rope/rope.h"
#include "amber/ops/cuda/rope/rope_table.cuh"

namespace amber::cuda {
namespace {

// A block takes kTokens consecutive tokens: a token's heads are often few (4 KV heads
// of 64 columns are 32 packs of 16 bytes), so a block per token left most of its
// threads idle behind the cos/sin row's latency.
constexpr int kTokens = 8;
constexpr int kThreads = 256;

// Each thread rotates V consecutive pairs (columns r .. r+V-1 with r+half .. r+half+V-1)
// of one head of one token, or copies V pass-through columns: 16-byte accesses when
// V = 16 / sizeof(T).
template <class T, int V>
__global__ void __launch_bounds__(kThreads) rope_kernel(const T* x, const int32_t* positions, const RopeParams p,
                                                        T* y, int64_t tokens, int64_t heads) {
  __shared__ float cos_row[kTokens][kMaxRopeHalf], sin_row[kTokens][kMaxRopeHalf];
  const auto [first, count] = rope_rows<kTokens>(p, positions, tokens, cos_row, sin_row);
  const int pass = p.dim - p.rotary_dim;
  const int per_head = (p.half + pass) / V;
  const int per_token = static_cast<int>(heads) * per_head;
  for (int k = threadIdx.x; k < count * per_token; k += blockDim.x) {
    const int u = k / per_token;
    const int64_t h = k % per_token / per_head;
    const int r = k % per_head * V;
    const T* hi = x + ((first + u) * heads + h) * p.dim;
    T* ho = y + ((first + u) * heads + h) * p.dim;
    if (r < p.half) {
      float a[V], b[V], ya[V], yb[V];
      load_f32<T, V>(hi + r, a);
      load_f32<T, V>(hi + r + p.half, b);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const float c = cos_row[u][r + e], s = sin_row[u][r + e];
        ya[e] = a[e] * c - b[e] * s;
        yb[e] = b[e] * c + a[e] * s;
      }
      store_f32<T, V>(ho + r, ya);
      store_f32<T, V>(ho + r + p.half, yb);
    } else {
      const int j = p.rotary_dim + (r - p.half);
      float a[V];
      load_f32<T, V>(hi + j, a);
      store_f32<T, V>(ho + j, a);
    }
  }
}

void rope_apply(const Tensor& x, const Tensor& positions, const RopeTable& table, Tensor& y, double sign,
                const char* op) {
  require_contiguous(x, op);
  require_contiguous(y, op);
  require_contiguous(positions, op);
  AMBER_CHECK(x.dtype() == y.dtype(), op, ": on the GPU input and output need one dtype, got ",
              dtype_name(x.dtype()), " and ", dtype_name(y.dtype()));
  const RopeParams p = rope_params(table, sign, op);
  const int half = p.half;
  const int64_t tokens = x.size(0), heads = x.size(1);
  if (tokens == 0 || heads == 0) return;
  with_element_type(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    constexpr int N = Pack<T>::n;
    const int pass = table.head_dim - table.rotary_dim;
    const bool packed = half % N == 0 && pass % N == 0 && aligned16(x.raw()) && aligned16(y.raw());
    const auto launch = [&](auto kernel) {
      kernel<<<static_cast<unsigned>((tokens + kTokens - 1) / kTokens), kThreads, 0, current_stream()>>>(
          static_cast<const T*>(x.raw()), static_cast<const int32_t*>(positions.raw()), p,
          static_cast<T*>(y.raw()), tokens, heads);
    };
    if (packed) launch(rope_kernel<T, N>);
    else launch(rope_kernel<T, 1>);
  });
  check_launch(op, x.shape());
}

}  // namespace

void rope_forward(const Tensor& x, const Tensor& positions, const RopeTable& table, Tensor& y) {
  rope_apply(x, positions, table, y, 1.0, "rope_forward");
}

void rope_backward(const Tensor& dy, const Tensor& positions, const RopeTable& table, Tensor& dx) {
  // The transpose of the rotation: the same scale, the negated angle.
  rope_apply(dy, positions, table, dx, -1.0, "rope_backward");
}

}  // namespace amber::cuda
