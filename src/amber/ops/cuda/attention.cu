// The CUDA attention entry points: they check the geometry, widen the sinks, compute
// the backward's row statistic delta and the sink gradient, and hand the tiles to the
// Hopper kernels (sm_90a on compute capability 9), the portable tensor-core kernels
// (bf16/f16, head_dim 64 and 128) or the fp32 SIMT kernels.
#include <cmath>

#include "amber/ops/cuda/attention.h"
#include "amber/ops/cuda/attention_tiles.cuh"
#include "amber/ops/cuda/common.cuh"

namespace amber::cuda {

dim3 attention_grid(const Layout& g, int rows, int heads, const char* op) {
  const int64_t slots = static_cast<int64_t>(g.num_docs) * tiles_per_doc(g, rows);
  AMBER_CHECK(slots < (int64_t{1} << 31) && heads <= 65535, op, ": ", g.num_docs,
              " documents of up to ", g.max_seqlen, " tokens with ", heads,
              " heads exceed the launch grid");
  return dim3(static_cast<unsigned>(slots), static_cast<unsigned>(heads));
}

// Set on every call because the attribute is per device.
void allow_smem(const void* kernel, size_t bytes, const char* op) {
  AMBER_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   static_cast<int>(bytes)) == cudaSuccess,
              op, ": cannot raise the shared-memory limit to ", bytes, " bytes");
}

namespace {

constexpr int kThreads = 256;

// delta[t, h] = dout . out of that row, one warp per row, fp32.
template <class T>
__global__ void delta_kernel(const T* dout, const T* out, int64_t rows, int dim, float* delta) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  float s = 0.0f;
  for (int d = threadIdx.x % 32; d < dim; d += 32)
    s = fmaf(to_f32(dout[row * dim + d]), to_f32(out[row * dim + d]), s);
  s = warp_sum(s);
  if (threadIdx.x % 32 == 0) delta[row] = s;
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

// The sinks as f32 on the device (they may be f32, bf16 or f16, like a master copy).
Tensor sinks_f32(const Tensor& sinks, const char* op) {
  if (!sinks.defined() || sinks.dtype() == DType::f32) return sinks;
  Tensor out = Tensor::empty(sinks.shape(), DType::f32, sinks.device());
  const int n = static_cast<int>(sinks.numel());
  with_element_type(sinks.dtype(), op, [&](auto tag) {
    using S = decltype(tag);
    widen_kernel<S><<<(n + 255) / 256, 256, 0, cudaStreamPerThread>>>(
        static_cast<const S*>(sinks.raw()), n, static_cast<float*>(out.raw()));
  });
  check_launch(op, sinks.shape());
  return out;
}

Layout layout_of(const Tensor& q, const Tensor& k, const SeqInfo& seq,
                 const AttentionOptions& options, const char* op) {
  // The grid is sized by max_seqlen; a smaller value would leave rows unwritten.
  for (int d = 0; d < seq.num_docs; ++d)
    AMBER_CHECK(seq.doc_length(d) <= seq.max_seqlen, op, ": document ", d, " has ",
                seq.doc_length(d), " tokens but seq.max_seqlen is ", seq.max_seqlen);
  return {static_cast<const int32_t*>(seq.cu_seqlens.raw()), seq.num_docs, seq.max_seqlen,
          static_cast<int>(q.size(1)), static_cast<int>(k.size(1)), options.window,
          static_cast<float>(options.softmax_scale)};
}

const float* f32_or_null(const Tensor& t) {
  return t.defined() ? static_cast<const float*>(t.raw()) : nullptr;
}

}  // namespace

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const SeqInfo& seq,
                       const AttentionOptions& options, const Tensor& sinks, Tensor& out,
                       Tensor& lse) {
  const char* op = "attention_forward";
  if (seq.total_tokens == 0) return;
  const Layout g = layout_of(q, k, seq, options, op);
  const Tensor sinks32 = sinks_f32(sinks, op);
  if (!options.portable_kernels && hopper::supports(q))
    hopper::forward(q, k, v, g, f32_or_null(sinks32), out, lse);
  else if (tensor_core::supports(q.dtype(), q.size(2)))
    tensor_core::forward(q, k, v, g, f32_or_null(sinks32), out, lse);
  else
    simt::forward(q, k, v, g, f32_or_null(sinks32), out, lse);
}

void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out, const Tensor& lse, const SeqInfo& seq,
                        const AttentionOptions& options, const Tensor& sinks, Tensor& dq,
                        Tensor& dk, Tensor& dv, Tensor& dsinks) {
  const char* op = "attention_backward";
  if (seq.total_tokens == 0) return;
  const Layout g = layout_of(q, k, seq, options, op);
  const int64_t rows = seq.total_tokens * g.heads;
  Tensor delta = Tensor::empty({seq.total_tokens, g.heads}, DType::f32, q.device());
  with_element_type(q.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    delta_kernel<T><<<static_cast<unsigned>((rows + kThreads / 32 - 1) / (kThreads / 32)),
                      kThreads, 0, cudaStreamPerThread>>>(
        static_cast<const T*>(dout.raw()), static_cast<const T*>(out.raw()), rows,
        static_cast<int>(q.size(2)), static_cast<float*>(delta.raw()));
  });
  check_launch(op, q.shape());
  if (!options.portable_kernels && hopper::supports(q))
    hopper::backward(dout, q, k, v, lse, delta, g, dq, dk, dv);
  else if (tensor_core::supports(q.dtype(), q.size(2)))
    tensor_core::backward(dout, q, k, v, lse, delta, g, dq, dk, dv);
  else
    simt::backward(dout, q, k, v, lse, delta, g, dq, dk, dv);
  if (!sinks.defined()) return;
  const Tensor sinks32 = sinks_f32(sinks, op);
  Tensor partial = Tensor::empty({1, g.heads}, DType::f32, q.device());
  dsinks_kernel<<<static_cast<unsigned>(g.heads), kThreads, 0, cudaStreamPerThread>>>(
      f32_or_null(sinks32), static_cast<const float*>(lse.raw()),
      static_cast<const float*>(delta.raw()), seq.total_tokens, g.heads,
      static_cast<float*>(partial.raw()));
  check_launch(op, sinks.shape());
  add_column_sums(partial, dsinks, op);
}

}  // namespace amber::cuda
