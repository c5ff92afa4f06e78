// Token embedding: a gather forward and a deterministic scatter-add backward.
#pragma once

#include "amber/core/tensor.h"

namespace amber {

// out [T, D] = table[ids[t]]; ids int32 [T], every id in [0, V).
void embedding_forward(const Tensor& table, const Tensor& ids, Tensor& out);
// dtable[ids[t]] += dout[t], summed in token order for every thread count.
void embedding_backward(const Tensor& dout, const Tensor& ids, Tensor& dtable);

}  // namespace amber
