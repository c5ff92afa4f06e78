// Causal attention over packed documents (cu_seqlens), with GQA, an optional
// sliding window and optional per-head attention sinks. The forward returns the
// per-row log-sum-exp so the backward recomputes the softmax instead of storing it.
//
// Layout: q [T, H, D], k and v [T, Hkv, D] with H % Hkv == 0; out [T, H, D];
// lse [T, H] (f64 for f64 inputs, f32 otherwise). Query head h reads KV head
// h / (H / Hkv). A query at position i of its document sees keys j of the same
// document with j <= i and, with window w > 0, j > i - w. All tensors are contiguous;
// q, k, v, out, dout and dq, dk, dv share one dtype (f64, f32, bf16 or f16; the narrow
// ones compute in f32 and round once on output).
//
// Sinks: one learnable logit per query head, a virtual key with value zero. It joins
// the softmax normaliser (so lse includes it) and contributes nothing to out. sinks
// and dsinks may have any floating dtype (an f32 master next to bf16 activations).
#pragma once

#include "amber/core/seq_info.h"
#include "amber/core/tensor.h"
#include "amber/ops/rope.h"

namespace amber {

struct AttentionOptions {
  double softmax_scale = 0.0;  // 0: head_dim^-0.5
  int window = 0;              // 0: unlimited; w: keys i-w+1 .. i
  // CUDA: the portable mma.sync kernels even where the Hopper path exists (to compare
  // the two and to test both on one card). The CPU ignores it.
  bool portable_kernels = false;
};

// `sinks` is [H] or undefined (no sinks).
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const SeqInfo& seq,
                       const AttentionOptions& options, const Tensor& sinks, Tensor& out,
                       Tensor& lse);

// The QK-norm + RoPE backward (rope.h) that follows the attention's in a layer whose q
// and k went through qk_norm_rope_forward. Given to attention_backward, its sides take
// the call's dq and dk as their dy (their own dy is ignored) and the two backward passes
// run as one op. On the Hopper path at head_dim 64 (bf16 or f16, shapes the fused
// QK-norm + RoPE kernel holds) dq is then never written: the norm's backward reads the
// attention's f32 sum of it, so no bf16 dq goes through memory.
struct QkNormRopeGrad {
  QkNormRopeBackward q, k;
  Tensor positions;
  const RopeTable* table = nullptr;
};

// Writes dq, dk, dv (overwritten) and accumulates dsinks (+=) when sinks are given.
// With `then`, its dx and dweight are written as qk_norm_rope_backward writes them, and
// dq and dk hold unspecified values afterwards.
void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out, const Tensor& lse, const SeqInfo& seq,
                        const AttentionOptions& options, const Tensor& sinks, Tensor& dq,
                        Tensor& dk, Tensor& dv, Tensor& dsinks, const QkNormRopeGrad* then = nullptr);

}  // namespace amber

namespace amber {

// Generation over a static-shape KV cache: k_cache and v_cache [S, capacity, Hkv, D].
// A step's new tokens are packed: sequence s owns rows [cu_q[s], cu_q[s + 1]) of q, k
// and v, and its new token j sits at position starts[s] + j. cu_q [S + 1] and starts [S]
// are int32 on the tensors' device, so a decode step captured in a CUDA graph replays
// with positions it reads at run time. Positions must stay below the capacity: the CPU
// checks, the GPU (which never reads values back) skips keys past it.

// Writes the new tokens' keys and values into their sequences' cache rows. k and v are
// [T, Hkv, D] with each token's [Hkv, D] block contiguous (a slice of a stacked
// projection will do), in the caches' dtype.
void kv_cache_append(const Tensor& k, const Tensor& v, const Tensor& cu_q, const Tensor& starts, Tensor& k_cache,
                     Tensor& v_cache);

// Attention of the new tokens q [T, H, D] over caches that already hold every key up to
// and including them: token j of sequence s sees that sequence's keys at positions <=
// its own (and inside the window), plus the sink. out [T, H, D], contiguous like q.
void attention_cached_forward(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& cu_q,
                              const Tensor& starts, const AttentionOptions& options, const Tensor& sinks,
                              Tensor& out);

}  // namespace amber
