// CUDA implementations behind ops/embedding.h: a row gather, and a scatter-add that sorts
// tokens by id (stable) so each table row is summed by one block in token order.
#pragma once

#include "amber/core/tensor.h"

namespace amber::cuda {

void embedding_forward(const Tensor& table, const Tensor& ids, Tensor& out);
void embedding_backward(const Tensor& dout, const Tensor& ids, Tensor& dtable);

}  // namespace amber::cuda
