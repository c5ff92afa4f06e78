// GradientReady: what a model's backward tells, block by block, about its parameter
// gradients, so that data parallel can start summing a slice of the gradient buffers
// over the ranks while the backward still computes the rest. The backward finishes
// parameters in the reverse of their declaration order (the head, the final norm, the
// blocks from the last, the embedding), so one index says which gradients are final.
#pragma once

#include <cstddef>

namespace amber {

class GradientReady {
 public:
  virtual ~GradientReady() = default;
  // Every parameter at `first` or later in declaration order (ParamStore::params())
  // holds its final gradient of the step: later writes touch only earlier parameters.
  // Called with decreasing `first` as the backward proceeds, the last time with 0.
  virtual void gradients_final(size_t first) = 0;
};

}  // namespace amber
