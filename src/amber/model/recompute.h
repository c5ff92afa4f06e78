// Activation recompute policies, chosen once per model from config.recompute:
// "none" keeps every block's intermediates from the forward; "block" keeps only each
// block's input and re-runs the block's forward right before its backward.
#pragma once

#include <memory>
#include <string>

#include "amber/model/block.h"

namespace amber {

class RecomputePolicy {
 public:
  virtual ~RecomputePolicy() = default;
  virtual ResidualStream forward(const Block& block, const ResidualStream& in, const SeqInfo& seq,
                                 Block::Saved& saved, Arena& activations, Arena& scratch) const = 0;
  // Leaves `scratch` empty on return.
  virtual void backward(const Block& block, Tensor& dx, const SeqInfo& seq, Block::Saved& saved,
                        Arena& scratch) const = 0;
  // Whether the backward repeats the block forward (for hardware FLOP accounting).
  virtual bool recomputes() const = 0;
};

std::unique_ptr<RecomputePolicy> make_recompute_policy(const std::string& name);

}  // namespace amber
