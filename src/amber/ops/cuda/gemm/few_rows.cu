// Products of a few rows against a linear layer's weight: c [m, n] = alpha a [m, k]
// b [n, k]^T + beta addend, m <= kFewRowsMax (a decode step: one token per sequence).
// Such a product is a stream of the weight; cuBLASLt's tiles leave most of each tile and
// of the card idle there. Here a warp takes kFewCols columns of c and a share of the k
// steps (16 bytes of each of its columns' weight rows a lane, every row of a against
// them from L1), so each weight byte is read once with several loads in flight a lane;
// the warps sharing columns add their sums in shared memory in a fixed order, so the
// bits repeat from run to run.
#include "amber/core/stream.h"
#include "amber/ops/cuda/common/common.cuh"
#include "amber/ops/cuda/gemm/gemm.h"

namespace amber::cuda {
namespace {

constexpr int kFewWarps = 8;
constexpr int kFewCols = 4;

// The block's warps: `groups` groups of kFewCols columns each, `split` warps a group
// taking every split-th k step (groups * split = kFewWarps).
struct FewRowsArgs {
  int m, n, k, split;
  int64_t ldc;
  float alpha, beta;
};

// M rows of a (a compile-time count, so that every load of a k step is issued before
// the sums that wait for it: the rows come from L2, whose latency, paid once a row,
// would otherwise dominate). Operands stay packed until each product needs them.
template <class T, class C, int M>
__global__ void __launch_bounds__(kFewWarps * 32)
    few_rows_kernel(const T* a, const T* b, C* c, const C* addend, FewRowsArgs p) {
  constexpr int V = Pack<T>::n;
  __shared__ float partial[kFewWarps][kFewCols * M];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = warp / p.split, share = warp % p.split, groups = kFewWarps / p.split;
  const int col0 = (blockIdx.x * groups + group) * kFewCols;
  const T* w[kFewCols];
#pragma unroll
  for (int j = 0; j < kFewCols; ++j)  // a column past n reads a valid row and is never stored
    w[j] = b + static_cast<int64_t>(min(col0 + j, p.n - 1)) * p.k;
  float acc[kFewCols][M];
#pragma unroll
  for (int j = 0; j < kFewCols; ++j)
#pragma unroll
    for (int r = 0; r < M; ++r) acc[j][r] = 0.0f;
  for (int at = (share * 32 + lane) * V; at < p.k; at += p.split * 32 * V) {
    Pack<T> wv[kFewCols], xv[M];
#pragma unroll
    for (int j = 0; j < kFewCols; ++j) wv[j] = *reinterpret_cast<const Pack<T>*>(w[j] + at);
#pragma unroll
    for (int r = 0; r < M; ++r) xv[r] = *reinterpret_cast<const Pack<T>*>(a + static_cast<int64_t>(r) * p.k + at);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      float x[M];
#pragma unroll
      for (int r = 0; r < M; ++r) x[r] = to_f32(xv[r].v[e]);
#pragma unroll
      for (int j = 0; j < kFewCols; ++j) {
        const float we = to_f32(wv[j].v[e]);
#pragma unroll
        for (int r = 0; r < M; ++r) acc[j][r] = fmaf(we, x[r], acc[j][r]);
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kFewCols; ++j)
#pragma unroll
    for (int r = 0; r < M; ++r) {
      const float s = warp_sum(acc[j][r]);
      if (lane == 0) partial[warp][j * M + r] = s;
    }
  __syncthreads();
  // Thread (group, j, r) adds its group's shares in order and writes c[r, col0 + j].
  const int t = threadIdx.x;
  if (t >= groups * kFewCols * M) return;
  const int g = t / (kFewCols * M), j = t / M % kFewCols, r = t % M;
  const int col = (blockIdx.x * groups + g) * kFewCols + j;
  if (col >= p.n) return;
  float sum = 0.0f;
  for (int s = 0; s < p.split; ++s) sum += partial[g * p.split + s][j * M + r];
  float out = p.alpha * sum;
  if (p.beta != 0.0f) out = fmaf(p.beta, to_f32(addend[r * p.ldc + col]), out);
  c[r * p.ldc + col] = from_f32<C>(out);
}

template <class T, class C, int M>
void launch(const Tensor& a, const Tensor& b, Tensor& c, const Tensor& addend, const FewRowsArgs& p, unsigned blocks) {
  if constexpr (M > 1) {
    if (p.m < M) return launch<T, C, M - 1>(a, b, c, addend, p, blocks);
  }
  few_rows_kernel<T, C, M><<<blocks, kFewWarps * 32, 0, current_stream()>>>(
      static_cast<const T*>(a.raw()), static_cast<const T*>(b.raw()), static_cast<C*>(c.raw()),
      static_cast<const C*>(addend.raw()), p);
}

}  // namespace

bool few_rows_gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, double alpha, double beta,
                   const Tensor& addend, int64_t ldc) {
  if (c.ndim() != 2 || ta || !tb || a.size(0) > kFewRowsMax) return false;
  const DType t = a.dtype();
  if (t != DType::f32 && t != DType::bf16 && t != DType::f16) return false;
  const int64_t k = a.size(1), vector = 16 / static_cast<int64_t>(dtype_size(t));
  if (k % vector != 0 || !aligned16(a.raw()) || !aligned16(b.raw())) return false;
  // As many warps on a column group as it has k steps, up to the whole block.
  const int64_t steps = (k + 32 * vector - 1) / (32 * vector);
  int split = 1;
  while (split < kFewWarps && split * 2 <= steps) split *= 2;
  const int64_t columns = b.size(0), per_block = int64_t{kFewWarps / split} * kFewCols;
  const FewRowsArgs p{static_cast<int>(a.size(0)), static_cast<int>(columns), static_cast<int>(k), split, ldc,
                      static_cast<float>(alpha), static_cast<float>(beta)};
  const unsigned blocks = static_cast<unsigned>((columns + per_block - 1) / per_block);
  // The addend shares c's rows: c itself, or a contiguous tensor where c is one too.
  const Tensor& add = addend.defined() ? addend : c;
  with_element_type(t, "gemm", [&](auto tag) {
    using T = decltype(tag);
    if (c.dtype() == t)
      launch<T, T, kFewRowsMax>(a, b, c, add, p, blocks);
    else
      launch<T, float, kFewRowsMax>(a, b, c, add, p, blocks);
  });
  check_launch("gemm", c.shape());
  return true;
}

}  // namespace amber::cuda
