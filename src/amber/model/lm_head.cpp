#include "amber/model/lm_head.h"

#include "amber/ops/elementwise.h"
#include "amber/ops/gemm.h"
#include "amber/ops/norm.h"

namespace amber {

LMHead::LMHead(const ModelConfig& c, const Placement& placement, std::shared_ptr<Param> tied)
    : owns_weight_(tied == nullptr) {
  if (tied) {
    weight_ = std::move(tied);
    weight_->shared = true;
  } else {
    weight_ = make_param("lm_head.weight", {c.vocab_size, c.dim}, placement);
    weight_->muon = false;  // the head trains with AdamW, like the embedding
    weight_->product_gradient = true;  // not when tied: the embedding's backward adds to that one
  }
  options_.z_loss_weight = c.z_loss_weight;
  options_.chunk_tokens = c.loss_chunk_tokens;
}

void LMHead::collect(std::vector<std::shared_ptr<Param>>& out) const {
  if (owns_weight_) out.push_back(weight_);
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
  linear_cross_entropy_forward(hidden, weight_->work, targets, options_, losses, lse);
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
  linear_cross_entropy_forward_backward(dlosses, hidden, weight_->work, targets, options_, losses, lse, dhidden,
                                        weight_->grad, weight_->grad_accumulates());
  linear_cross_entropy_sums(losses, lse, targets, options_, sums);
  return dhidden;
}

Tensor LMHead::logits(const Tensor& hidden) const {
  Tensor out = Tensor::empty({hidden.size(0), weight_->work.size(0)}, hidden.dtype(), hidden.device());
  linear_forward(hidden, weight_->work, Tensor(), out);
  return out;
}

}  // namespace amber
