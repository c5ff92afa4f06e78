// LMHead: owns the objective. Projects hidden states to the vocabulary fused with
// cross-entropy (+ z-loss) in token chunks; per-token losses are reduced in double on
// the model's device, into sums the caller reads once per optimizer step.
#pragma once

#include <memory>
#include <vector>

#include "amber/core/arena.h"
#include "amber/model/config.h"
#include "amber/model/linear.h"
#include "amber/ops/loss.h"

namespace amber {

class LMHead {
 public:
  struct Loss {
    double sum = 0;         // sum over trained tokens of ce + z * lse^2
    double z_loss_sum = 0;  // the z-loss part of `sum`
    int64_t tokens = 0;     // trained tokens (targets != ignore index)

    // The loss sums a forward accumulates on the device: f64 [3] = {sum, z_loss_sum, tokens}.
    static Tensor zero_sums(Device device);
    // The host copy of such sums (one synchronisation on a GPU).
    static Loss read(const Tensor& sums);
  };

  // Declares `lm_head.weight` in `store`, or with `tied` reads the embedding matrix
  // instead of a weight of its own.
  LMHead(const ModelConfig& config, ParamStore& store, std::shared_ptr<Param> tied);

  const Tensor& weight() const { return projection_.weight().value; }

  // Adds this batch's loss to `sums` (Loss::zero_sums, on the device of `hidden`)
  // without waiting for the host.
  void forward(const Tensor& hidden, const Tensor& targets, Arena& arena, Tensor& sums) const;
  // Training: forward as above and, in the same pass over the logits, returns
  // d(loss_scale * sum)/d(hidden); the head weight gradient accumulates. loss_scale is
  // one f64 element on the device of `hidden`, read there.
  Tensor forward_backward(const Tensor& hidden, const Tensor& targets, const Tensor& loss_scale, Arena& arena,
                          Tensor& sums) const;
  // Materialised logits [T, V] for sampling and analysis (never in training).
  Tensor logits(const Tensor& hidden) const;

 private:
  // The head's product runs fused with the loss (ops/loss.h) in training and
  // evaluation; its plain forward gives materialised logits.
  Linear projection_;
  CrossEntropyOptions options_;
};

}  // namespace amber
