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

}  // namespace amber::cuda
