// CUDA chunked linear cross-entropy with z-loss. Only chunk_tokens x V logits exist
// at once: cuBLASLt writes them in the operands' dtype into one buffer reused by every
// chunk, a row kernel reduces them in f32 (and, in the backward, overwrites them with
// d(loss)/d(logits)), and two cuBLASLt products give dx and dw (+=). The per-token
// losses are summed on the device in fixed chunks, so a step never reads them on the
// host.
//
// Why logits in the operands' dtype (bf16 in training) rather than f32: a logit made
// from bf16 x and w already carries the inputs' rounding (about one bf16 unit of the
// terms' scale), and rounding its result once more adds an error of the same order,
// while f32 logits double the bytes every kernel of the head moves. PyTorch's bf16
// autocast computes its logits the same way.
#include <algorithm>
#include <cstdio>
#include <type_traits>

#include "amber/core/stream.h"
#include "amber/ops/cuda/common/common.cuh"
#include "amber/ops/cuda/gemm/gemm.h"
#include "amber/ops/cuda/loss/loss.h"

namespace amber::cuda {
namespace {

// The row kernels run one block of kThreads per SM, each walking rows with a stride of
// the grid: the rows in flight (one per SM, 128 KB of bf16 at vocab 65536) stay in L2,
// so the fused kernel's second read of a row hits L2 rather than memory.
constexpr int kThreads = 1024;
// Packs each thread loads before it reduces them: enough bytes in flight per SM to
// cover memory latency.
constexpr int kUnroll = 4;
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ void check_target(int32_t y, int32_t ignore, int64_t vocab, int64_t token) {
  if (y != ignore && (y < 0 || y >= vocab)) {
    if (threadIdx.x == 0)
      printf("amber linear_cross_entropy: target %d at token %lld is outside the vocabulary [0, %lld) "
             "and is not the ignore index %d\n",
             y, static_cast<long long>(token), static_cast<long long>(vocab), ignore);
    __trap();
  }
}

// A row's elements in 16-byte packs when every row starts on a 16-byte boundary, else
// one by one; each thread owns the same elements in every pass.
template <class L>
__device__ __forceinline__ bool rows_in_packs(int64_t vocab) {
  return vocab % Pack<L>::n == 0;
}

template <class L>
__device__ __forceinline__ void load_pack(const L* row, int64_t pack, bool streaming, float (&out)[Pack<L>::n]) {
  const float4* p = reinterpret_cast<const float4*>(row) + pack;
  const float4 raw = streaming ? __ldcs(p) : *p;
  const Pack<L> a = *reinterpret_cast<const Pack<L>*>(&raw);
#pragma unroll
  for (int e = 0; e < Pack<L>::n; ++e) out[e] = to_f32(a.v[e]);
}

// Stored past L2's keeping: nothing reads the gradient again in this kernel.
// bf16 and f16 elements are rounded in pairs (one conversion instruction per pair).
template <class L>
__device__ __forceinline__ void store_pack_streaming(L* row, int64_t pack, const float (&in)[Pack<L>::n]) {
  Pack<L> a;
  if constexpr (std::is_same_v<L, __nv_bfloat16>) {
#pragma unroll
    for (int e = 0; e < Pack<L>::n; e += 2)
      *reinterpret_cast<__nv_bfloat162*>(&a.v[e]) = __floats2bfloat162_rn(in[e], in[e + 1]);
  } else if constexpr (std::is_same_v<L, __half>) {
#pragma unroll
    for (int e = 0; e < Pack<L>::n; e += 2) *reinterpret_cast<__half2*>(&a.v[e]) = __floats2half2_rn(in[e], in[e + 1]);
  } else {
#pragma unroll
    for (int e = 0; e < Pack<L>::n; ++e) a.v[e] = in[e];
  }
  __stcs(reinterpret_cast<float4*>(row) + pack, *reinterpret_cast<const float4*>(&a));
}

// 2^x from the special-function unit alone: exp2f adds instructions to keep results
// below 2^-126, and no probability that small changes a loss or a bf16 gradient.
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Folds x into a thread's running (max m, sum s of 2^((x - m) log2 e)), the max and
// exponents in log2 units so each term is one ex2.
__device__ __forceinline__ void fold(float top, const float* x, int n, float& m, float& s) {
  const float t = top * kLog2e;
  if (t > m) {
    s = m == -INFINITY ? 0.0f : s * ex2(m - t);
    m = t;
  }
  for (int e = 0; e < n; ++e) s += ex2(fmaf(x[e], kLog2e, -m));
}

// Log-sum-exp of one row of logits, returned to every thread of the block, in one pass
// over the row: each thread keeps a running (max, sum) pair, rescaled when its max
// grows, and the block combines the pairs.
template <class L>
__device__ float row_lse(const L* z, int64_t vocab, float* scratch) {
  float m = -INFINITY, s = 0.0f;  // m in log2 units
  if (rows_in_packs<L>(vocab)) {
    constexpr int P = Pack<L>::n;
    const int64_t packs = vocab / P;
    for (int64_t i = threadIdx.x; i < packs; i += kUnroll * blockDim.x) {
      float x[kUnroll][P];
      float top = -INFINITY;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t k = i + u * blockDim.x;
        if (k < packs) {
          load_pack<L>(z, k, false, x[u]);
        } else {
#pragma unroll
          for (int e = 0; e < P; ++e) x[u][e] = -INFINITY;
        }
#pragma unroll
        for (int e = 0; e < P; ++e) top = fmaxf(top, x[u][e]);
      }
      if (top == -INFINITY) continue;
      fold(top, &x[0][0], kUnroll * P, m, s);
    }
  } else {
    for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) {
      const float x = to_f32(z[v]);
      fold(x, &x, 1, m, s);
    }
  }
  const float block_m = block_max(m, scratch);
  const float mine = m == -INFINITY ? 0.0f : s * ex2(m - block_m);
  return (block_m + log2f(block_sum(mine, scratch))) / kLog2e;
}

// The lse and loss of one row (thread 0 writes them): loss = lse - z[y] + zw * lse^2.
template <class L>
__device__ __forceinline__ float row_loss(const L* z, int32_t y, int64_t vocab, int32_t ignore, float z_weight,
                                          float* scratch, float* loss, float* lse) {
  const float l = row_lse(z, vocab, scratch);
  if (threadIdx.x == 0) {
    *lse = l;
    *loss = y == ignore ? 0.0f : l - to_f32(z[y]) + z_weight * l * l;
  }
  return l;
}

// z[v] becomes softmax(z)[v] * dloss * (1 + 2 zw lse) - dloss * [v == y], in place
// (a zero row for an ignored token: its scale is zero, and every exponent is at most
// zero because lse bounds the row). This is the row's last read: streaming loads, so
// the rows other blocks are between their two reads keep L2.
template <class L>
__device__ __forceinline__ void row_gradient(L* z, int32_t y, float l, float dloss, int64_t vocab, int32_t ignore,
                                             float z_weight) {
  const bool ignored = y == ignore;
  const float scale = ignored ? 0.0f : dloss * (1.0f + 2.0f * z_weight * l), l2 = l * kLog2e;
  const float target_term = ignored ? 0.0f : dloss;
  // softmax * scale - minus, in one multiply-add after the exponential.
  const auto grad = [&](float x, float minus) { return fmaf(ex2(fmaf(x, kLog2e, -l2)), scale, -minus); };
  if (rows_in_packs<L>(vocab)) {
    constexpr int P = Pack<L>::n;
    const int64_t packs = vocab / P;
    // The thread whose packs hold the target reads its logit before it overwrites the
    // pack, and rewrites that one element afterwards with the target's term: the other
    // elements need no test.
    const bool owns_target = !ignored && (y / P) % blockDim.x == threadIdx.x;
    const float target_logit = owns_target ? to_f32(z[y]) : 0.0f;
    for (int64_t i = threadIdx.x; i < packs; i += kUnroll * blockDim.x) {
      float x[kUnroll][P];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (i + u * blockDim.x < packs) load_pack<L>(z, i + u * blockDim.x, true, x[u]);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t k = i + u * blockDim.x;
        if (k >= packs) continue;
#pragma unroll
        for (int e = 0; e < P; ++e) x[u][e] = grad(x[u][e], 0.0f);
        store_pack_streaming<L>(z, k, x[u]);
      }
    }
    if (owns_target) z[y] = from_f32<L>(grad(target_logit, target_term));  // after its pack's store
  } else {
    for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) {
      z[v] = from_f32<L>(grad(to_f32(__ldcs(z + v)), v == y ? target_term : 0.0f));
    }
  }
}

struct RowArgs {
  const int32_t* targets;
  const float* dlosses;
  int64_t rows, vocab, first_token;
  int32_t ignore;
  float z_weight;
  float *losses, *lse;  // written by the forward and fused kernels, read by the backward
};

// Each kernel walks the chunk's token rows (every pointer in `a` offset to the chunk).
template <class L>
__global__ void __launch_bounds__(kThreads) ce_forward_kernel(const L* logits, RowArgs a) {
  __shared__ float scratch[32];
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    check_target(a.targets[r], a.ignore, a.vocab, a.first_token + r);
    row_loss(logits + r * a.vocab, a.targets[r], a.vocab, a.ignore, a.z_weight, scratch, a.losses + r, a.lse + r);
  }
}

template <class L>
__global__ void __launch_bounds__(kThreads) ce_backward_kernel(L* logits, RowArgs a) {
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    check_target(a.targets[r], a.ignore, a.vocab, a.first_token + r);
    row_gradient(logits + r * a.vocab, a.targets[r], a.lse[r], a.dlosses[r], a.vocab, a.ignore, a.z_weight);
  }
}

// Asks for `bytes` from p (16-byte aligned, a multiple of 16) to be brought into L2,
// without waiting for them (sm_90 and later; elsewhere nothing).
__device__ __forceinline__ void prefetch_l2(const void* p, uint32_t bytes) {
#if __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#endif
}

// The forward and the backward of a row from one product: the row is read once for
// its lse and once, from L2, for the gradient. While a row's gradient is written, the
// block's next row is brought into L2, so its first read does not leave memory idle
// between the rows (the block's reductions and its L2-bound second pass).
template <class L>
__global__ void __launch_bounds__(kThreads) ce_fused_kernel(L* logits, RowArgs a) {
  __shared__ float scratch[32];
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    check_target(a.targets[r], a.ignore, a.vocab, a.first_token + r);
    L* z = logits + r * a.vocab;
    const float l = row_loss(z, a.targets[r], a.vocab, a.ignore, a.z_weight, scratch, a.losses + r, a.lse + r);
    __syncthreads();  // thread 0 read z[y] before the row is overwritten
    if (threadIdx.x == 0 && r + gridDim.x < a.rows && rows_in_packs<L>(a.vocab))
      prefetch_l2(z + gridDim.x * a.vocab, static_cast<uint32_t>(a.vocab * sizeof(L)));
    row_gradient(z, a.targets[r], l, a.dlosses[r], a.vocab, a.ignore, a.z_weight);
  }
}

unsigned row_grid(int64_t rows) { return static_cast<unsigned>(std::min<int64_t>(rows, sm_count())); }

constexpr int kSumThreads = 256;
constexpr int64_t kSumChunk = 4096;  // tokens per block of linear_cross_entropy_sums

__device__ __forceinline__ double warp_sum_f64(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// One block per fixed chunk of tokens: partial[chunk] = {loss, z-loss, count} over its
// trained tokens, in double. Each thread folds a fixed stride of tokens, then a fixed
// butterfly and warp order: the same bits on every run.
__global__ void loss_chunk_sums(const float* losses, const float* lse, const int32_t* targets, int64_t n,
                                int32_t ignore, double z_weight, double* partial) {
  __shared__ double scratch[kLossSums][32];
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kSumChunk;
  const int64_t end = begin + kSumChunk < n ? begin + kSumChunk : n;
  double v[kLossSums] = {};
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    if (targets[i] == ignore) continue;
    const double e = lse[i];
    v[step_slot::loss_sum] += static_cast<double>(losses[i]);
    v[step_slot::z_loss_sum] += z_weight * e * e;
    v[step_slot::trained_tokens] += 1.0;
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int k = 0; k < kLossSums; ++k) {
    v[k] = warp_sum_f64(v[k]);
    if (lane == 0) scratch[k][warp] = v[k];
  }
  __syncthreads();
  if (warp != 0) return;
  for (int k = 0; k < kLossSums; ++k) {
    const double total = warp_sum_f64(lane < warps ? scratch[k][lane] : 0.0);
    if (lane == 0) partial[kLossSums * blockIdx.x + k] = total;
  }
}

// sums[k] += the chunk partials of column k, added in chunk order (one thread each).
__global__ void add_chunk_sums(const double* partial, int64_t chunks, double* sums) {
  const int k = threadIdx.x;
  if (k >= kLossSums) return;
  double s = 0.0;
  for (int64_t c = 0; c < chunks; ++c) s += partial[kLossSums * c + k];
  sums[k] += s;
}

void require_f32(const Tensor& t, const char* what, const char* op) {
  require_contiguous(t, op);
  AMBER_CHECK(t.dtype() == DType::f32, op, ": ", what, " must be f32 on the GPU, got ",
              dtype_name(t.dtype()));
}

int64_t chunk_rows(const CrossEntropyOptions& o, int64_t tokens) {
  return o.chunk_tokens < tokens ? o.chunk_tokens : (tokens > 0 ? tokens : 1);
}

// The row kernels' view of a chunk starting at token t0 (losses and lse are written
// only by the kernels that produce them).
RowArgs row_args(const CrossEntropyOptions& o, const Tensor& targets, const Tensor& dlosses,
                 const Tensor& losses, const Tensor& lse, int64_t rows, int64_t vocab, int64_t t0) {
  return {static_cast<const int32_t*>(targets.raw()) + t0,
          dlosses.defined() ? static_cast<const float*>(dlosses.raw()) + t0 : nullptr,
          rows,
          vocab,
          t0,
          o.ignore_index,
          static_cast<float>(o.z_loss_weight),
          losses.defined() ? static_cast<float*>(losses.raw()) + t0 : nullptr,
          static_cast<float*>(lse.raw()) + t0};
}

// The backward's chunk loop: logits by cuBLASLt in w's dtype, a row kernel that
// overwrites them with d(loss)/d(logits) (with_forward: also writing loss and lse, so
// the forward's product is not needed), then dx and dw (+=, or = from the first chunk
// on without accumulate_dw) by cuBLASLt.
void chunked_gradient(const char* op, bool with_forward, const Tensor& dlosses, const Tensor& x,
                      const Tensor& w, const Tensor& targets, const CrossEntropyOptions& o,
                      const Tensor& losses, const Tensor& lse, Tensor& dx, Tensor& dw, bool accumulate_dw) {
  require_contiguous(targets, op);
  require_f32(dlosses, "dlosses", op);
  require_f32(lse, "lse", op);
  const int64_t tokens = x.size(0), vocab = w.size(0);
  if (tokens == 0) {
    if (!accumulate_dw) dw.zero();
    return;
  }
  AMBER_CHECK(vocab > 0, op, ": empty vocabulary");
  const int64_t chunk = chunk_rows(o, tokens);
  Tensor logits = Tensor::empty({chunk, vocab}, w.dtype(), x.device());
  for (int64_t t0 = 0; t0 < tokens; t0 += chunk) {
    const int64_t rows = chunk < tokens - t0 ? chunk : tokens - t0;
    Tensor block = logits.slice(0, 0, rows);
    const Tensor xs = x.slice(0, t0, t0 + rows);
    gemm(xs, false, w, true, block, 1.0, 0.0);
    const RowArgs a = row_args(o, targets, dlosses, losses, lse, rows, vocab, t0);
    with_element_type(block.dtype(), op, [&](auto tag) {
      using L = decltype(tag);
      L* z = static_cast<L*>(block.raw());
      if (with_forward)
        ce_fused_kernel<L><<<row_grid(rows), kThreads, 0, current_stream()>>>(z, a);
      else
        ce_backward_kernel<L><<<row_grid(rows), kThreads, 0, current_stream()>>>(z, a);
    });
    check_launch(op, block.shape());
    Tensor dxs = dx.slice(0, t0, t0 + rows);
    gemm(block, false, w, false, dxs, 1.0, 0.0);
    gemm(block, true, xs, false, dw, 1.0, accumulate_dw || t0 > 0 ? 1.0 : 0.0);
  }
}

}  // namespace

void linear_cross_entropy_forward(const Tensor& x, const Tensor& w, const Tensor& targets,
                                  const CrossEntropyOptions& o, Tensor& losses, Tensor& lse) {
  const char* op = "linear_cross_entropy_forward";
  require_contiguous(targets, op);
  require_f32(losses, "losses", op);
  require_f32(lse, "lse", op);
  const int64_t tokens = x.size(0), vocab = w.size(0);
  if (tokens == 0) return;
  AMBER_CHECK(vocab > 0, op, ": empty vocabulary");
  const int64_t chunk = chunk_rows(o, tokens);
  Tensor logits = Tensor::empty({chunk, vocab}, w.dtype(), x.device());
  for (int64_t t0 = 0; t0 < tokens; t0 += chunk) {
    const int64_t rows = chunk < tokens - t0 ? chunk : tokens - t0;
    Tensor block = logits.slice(0, 0, rows);
    gemm(x.slice(0, t0, t0 + rows), false, w, true, block, 1.0, 0.0);
    const RowArgs a = row_args(o, targets, Tensor(), losses, lse, rows, vocab, t0);
    with_element_type(block.dtype(), op, [&](auto tag) {
      using L = decltype(tag);
      ce_forward_kernel<L><<<row_grid(rows), kThreads, 0, current_stream()>>>(static_cast<const L*>(block.raw()), a);
    });
    check_launch(op, block.shape());
  }
}

void linear_cross_entropy_backward(const Tensor& dlosses, const Tensor& x, const Tensor& w,
                                   const Tensor& targets, const Tensor& lse,
                                   const CrossEntropyOptions& o, Tensor& dx, Tensor& dw, bool accumulate_dw) {
  chunked_gradient("linear_cross_entropy_backward", false, dlosses, x, w, targets, o, Tensor(), lse, dx, dw,
                   accumulate_dw);
}

void linear_cross_entropy_forward_backward(const Tensor& dlosses, const Tensor& x, const Tensor& w,
                                           const Tensor& targets, const CrossEntropyOptions& o,
                                           Tensor& losses, Tensor& lse, Tensor& dx, Tensor& dw,
                                           bool accumulate_dw) {
  const char* op = "linear_cross_entropy_forward_backward";
  require_f32(losses, "losses", op);
  chunked_gradient(op, true, dlosses, x, w, targets, o, losses, lse, dx, dw, accumulate_dw);
}

void linear_cross_entropy_sums(const Tensor& losses, const Tensor& lse, const Tensor& targets,
                               const CrossEntropyOptions& o, Tensor& sums) {
  const char* op = "linear_cross_entropy_sums";
  require_f32(losses, "losses", op);
  require_f32(lse, "lse", op);
  const int64_t tokens = losses.numel();
  if (tokens == 0) return;
  // The partials come from the stream-ordered pool: nothing here waits for the host.
  const int64_t chunks = (tokens + kSumChunk - 1) / kSumChunk;
  Tensor partial = Tensor::empty({chunks, kLossSums}, DType::f64, losses.device());
  loss_chunk_sums<<<static_cast<unsigned>(chunks), kSumThreads, 0, current_stream()>>>(
      static_cast<const float*>(losses.raw()), static_cast<const float*>(lse.raw()),
      static_cast<const int32_t*>(targets.raw()), tokens, o.ignore_index, o.z_loss_weight,
      static_cast<double*>(partial.raw()));
  check_launch(op, losses.shape());
  add_chunk_sums<<<1, 32, 0, current_stream()>>>(static_cast<const double*>(partial.raw()), chunks,
                                                    static_cast<double*>(sums.raw()));
  check_launch(op, losses.shape());
}

}  // namespace amber::cuda
