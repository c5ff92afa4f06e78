// CPU implementation behind ops/attention.h: inputs validated by the entry points and
// options.softmax_scale already resolved (> 0).
#pragma once

#include "amber/core/seq_info.h"
#include "amber/core/tensor.h"
#include "amber/ops/attention.h"

namespace amber::cpu {

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const SeqInfo& seq,
                       const AttentionOptions& options, const Tensor& sinks, Tensor& out,
                       Tensor& lse);
void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out, const Tensor& lse, const SeqInfo& seq,
                        const AttentionOptions& options, const Tensor& sinks, Tensor& dq,
                        Tensor& dk, Tensor& dv, Tensor& dsinks);

}  // namespace amber::cpu
