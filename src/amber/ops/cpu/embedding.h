// CPU implementations behind ops/embedding.h (shapes validated by the entry points).
#pragma once

#include "amber/core/tensor.h"

namespace amber::cpu {

void embedding_forward(const Tensor& table, const Tensor& ids, Tensor& out);
void embedding_backward(const Tensor& dout, const Tensor& ids, Tensor& dtable);

}  // namespace amber::cpu
