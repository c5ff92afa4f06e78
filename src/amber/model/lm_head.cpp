#include "amber/model/lm_head.h"

#include "amber/ops/elementwise.h"
#include <cmath>

#include "amber/ops/norm.h"

namespace amber {

namespace {

// Untied, the head's weight is its own, whose gradient its product writes; tied, the
// embedding's, whose backward adds to that gradient.
Linear head_projection(const ModelConfig& c, ParamStore& store, std::shared_ptr<Param> tied) {
  if (tied) return Linear(std::move(tied), nullptr, kComputeDtypeRecipe);
  return Linear(store, {"lm_head", c.dim, c.vocab_size, false, ParamRole::head,
                        1.0 / std::sqrt(static_cast<double>(c.dim))});
}

}  // namespace

LMHead::LMHead(const ModelConfig& c, ParamStore& store, std::shared_ptr<Param> tied)
    : projection_(head_projection(c, store, std::move(tied))) {
  options_.z_loss_weight = c.z_loss_weight;
  options_.chunk_tokens = c.loss_chunk_tokens;
}

Tensor LMHead::Loss::zero_sums(Device device) { return Tensor::zeros({kLossSums}, DType::f64, device); }

LMHead::Loss LMHead::Loss::read(const Tensor& sums) {
  const std::vector<double> v = sums.to_doubles();
  AMBER_CHECK(v.size() == 3, "LMHead::Loss::read: sums must hold 3 values, got ", sums.shape());
  return {v[step_slot::loss_sum], v[step_slot::z_loss_sum], static_cast<int64_t>(v[step_slot::trained_tokens])};
}

void LMHead::forward(const Tensor& hidden, const Tensor& targets, Arena& arena, Tensor& sums) const {
  const int64_t tokens = hidden.size(0);
  const DType stat = norm_stat_dtype(hidden.dtype());
  Tensor losses = arena.alloc({tokens}, stat), lse = arena.alloc({tokens}, stat);
  linear_cross_entropy_forward(hidden, projection_.weight().work, targets, options_, losses, lse);
  linear_cross_entropy_sums(losses, lse, targets, options_, sums);
}

Tensor LMHead::forward_backward(const Tensor& hidden, const Tensor& targets, const Tensor& loss_scale, Arena& arena,
                                Tensor& sums) const {
  const int64_t tokens = hidden.size(0);
  const DType stat = norm_stat_dtype(hidden.dtype());
  Tensor losses = arena.alloc({tokens}, stat), lse = arena.alloc({tokens}, stat);
  Tensor dlosses = arena.alloc({tokens}, stat);
  fill_from_scalar(dlosses, loss_scale);
  Tensor dhidden = arena.alloc(hidden.shape(), hidden.dtype());
  Param& w = projection_.weight();
  linear_cross_entropy_forward_backward(dlosses, hidden, w.work, targets, options_, losses, lse, dhidden, w.grad,
                                        w.grad_accumulates());
  linear_cross_entropy_sums(losses, lse, targets, options_, sums);
  return dhidden;
}

Tensor LMHead::logits(const Tensor& hidden) const {
  Tensor out = Tensor::empty({hidden.size(0), projection_.out_features()}, hidden.dtype(), hidden.device());
  Arena scratch(hidden.device());  // for a recipe's temporaries; the head's own takes none
  projection_.forward_into(hidden, out, scratch);
  return out;
}

}  // namespace amber
