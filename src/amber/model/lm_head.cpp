#include "amber/model/lm_head.h"

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
  }
  options_.z_loss_weight = c.z_loss_weight;
  options_.chunk_tokens = c.loss_chunk_tokens;
}

void LMHead::collect(std::vector<std::shared_ptr<Param>>& out) const {
  if (owns_weight_) out.push_back(weight_);
}

LMHead::Loss LMHead::forward(const Tensor& hidden, const Tensor& targets, Saved& s, Arena& arena) const {
  const int64_t tokens = hidden.size(0);
  const DType stat = norm_stat_dtype(hidden.dtype());
  Tensor losses = arena.alloc({tokens}, stat);
  s.hidden = hidden;
  s.targets = targets;
  s.lse = arena.alloc({tokens}, stat);
  linear_cross_entropy_forward(hidden, weight_->work, targets, options_, losses, s.lse);
  // Per-token losses are reduced on the host in double (a device reduction that keeps
  // the step free of host synchronisation comes with the CUDA graph step).
  Loss loss;
  const Tensor host_targets = targets.to(Device::cpu());
  const std::vector<double> loss_values = losses.to_doubles(), lse_values = s.lse.to_doubles();
  const int32_t* tg = host_targets.data<int32_t>();
  for (int64_t t = 0; t < tokens; ++t) {
    if (tg[t] == options_.ignore_index) continue;
    const double lse = lse_values[static_cast<size_t>(t)];
    loss.sum += loss_values[static_cast<size_t>(t)];
    loss.z_loss_sum += options_.z_loss_weight * lse * lse;
    ++loss.tokens;
  }
  return loss;
}

Tensor LMHead::backward(double loss_scale, const Saved& s, Arena& arena) const {
  const int64_t tokens = s.hidden.size(0);
  Tensor dlosses = arena.alloc({tokens}, s.lse.dtype());
  dlosses.fill(loss_scale);
  Tensor dhidden = arena.alloc(s.hidden.shape(), s.hidden.dtype());
  linear_cross_entropy_backward(dlosses, s.hidden, weight_->work, s.targets, s.lse, options_, dhidden,
                                weight_->grad);
  return dhidden;
}

Tensor LMHead::logits(const Tensor& hidden) const {
  Tensor out = Tensor::empty({hidden.size(0), weight_->work.size(0)}, hidden.dtype(), hidden.device());
  linear_forward(hidden, weight_->work, Tensor(), out);
  return out;
}

}  // namespace amber
