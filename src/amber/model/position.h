// Position encodings behind the `posenc` registry: rope (default) and none (NoPE).
// One instance is built per model and shared by every attention layer.
#pragma once

#include "amber/core/seq_info.h"
#include "amber/model/config.h"
#include "amber/model/registry.h"
#include "amber/ops/rope.h"

namespace amber {

class PositionEncoding {
 public:
  virtual ~PositionEncoding() = default;
  // Rotates q [T, H, Dh] and k [T, Hkv, Dh] in place by each token's position
  // (int32 [T]; SeqInfo::positions in training, cache offsets in generation).
  virtual void forward(Tensor& q, Tensor& k, const Tensor& positions) const = 0;
  // The transpose, applied in place to the incoming gradients.
  virtual void backward(Tensor& dq, Tensor& dk, const Tensor& positions) const = 0;
  // The rotary table when this encoding is RoPE (a pass that fuses QK-norm with the
  // rotation reads it), else null.
  virtual const RopeTable* rope_table() const { return nullptr; }
};

const Registry<PositionEncoding, const ModelConfig&>& position_registry();

}  // namespace amber
