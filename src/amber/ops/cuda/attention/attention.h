// CUDA implementation behind ops/attention.h: f32/bf16/f16 inputs, head_dim 32, 64 or
// 128, fp32 online softmax, a deterministic backward (no atomics). Inputs validated by
// the entry points; options.softmax_scale already resolved (> 0); seq.cu_seqlens on the GPU.
#pragma once

#include "amber/core/seq_info.h"
#include "amber/core/tensor.h"
#include "amber/ops/attention.h"

namespace amber::cuda {

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const SeqInfo& seq,
                       const AttentionOptions& options, const Tensor& sinks, Tensor& out,
                       Tensor& lse);
void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out, const Tensor& lse, const SeqInfo& seq,
                        const AttentionOptions& options, const Tensor& sinks, Tensor& dq,
                        Tensor& dk, Tensor& dv, Tensor& dsinks, const QkNormRopeGrad* then);
// Generation (ops/attention.h): any head_dim that is a multiple of 32 up to 256.
void kv_cache_append(const Tensor& k, const Tensor& v, const Tensor& cu_q, const Tensor& starts, Tensor& k_cache,
                     Tensor& v_cache);
void attention_cached_forward(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& cu_q,
                              const Tensor& starts, const AttentionOptions& options, const Tensor& sinks,
                              Tensor& out);

}  // namespace amber::cuda
