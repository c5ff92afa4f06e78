// Filling tensors from the Philox stream. Element i of the tensor (row-major) takes
// stream index `offset + i`, on any device, so a CPU and a GPU fill agree bit for bit.
#pragma once

#include <cstdint>

#include "amber/core/tensor.h"

namespace amber {

void fill_uniform(Tensor& t, uint64_t seed, uint64_t offset, float low = 0.0f, float high = 1.0f);
void fill_normal(Tensor& t, uint64_t seed, uint64_t offset, float mean = 0.0f, float std = 1.0f);

namespace cuda {
void fill_uniform(Tensor& t, uint64_t seed, uint64_t offset, float low, float high);
void fill_normal(Tensor& t, uint64_t seed, uint64_t offset, float mean, float std);
}  // namespace cuda

}  // namespace amber
