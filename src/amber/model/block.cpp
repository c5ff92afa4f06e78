#include "amber/model/block.h"

#include "amber/core/error.h"
#include "amber/ops/elementwise.h"

namespace amber {

Block::Block(const ModelConfig& c, int index, ParamStore& store, std::shared_ptr<const PositionEncoding> position)
    : residual_scale_(c.residual_scale()),
      // A bias is added after the product, unscaled: with a residual scale the branch's
      // bias would be scaled too, so those models add in the norm.
      adds_in_projections_(!c.post_norm && (!c.attn_bias || c.residual_scale() == 1.0)) {
  const std::string prefix = concat("layers.", index);
  auto norm = [&](const std::string& name) {
    return norm_registry().build(c.norm, {prefix + "." + name, c.dim, c.norm_eps, true, &store});
  };
  attn_norm_ = norm("attn_norm");
  attn_ = attention_registry().build(
      c.attention, {prefix + ".attn", &c, c.layer_windows()[static_cast<size_t>(index)], &store, std::move(position)});
  if (c.post_norm) post_attn_norm_ = norm("post_attn_norm");
  mlp_norm_ = norm("mlp_norm");
  const bool sparse = c.layer_is_sparse(index);
  mlp_ = mlp_registry().build(sparse ? "moe" : c.mlp, {prefix + ".mlp", c.dim,
                                                       sparse ? c.moe_hidden : c.resolved_mlp_hidden(), c.attn_bias,
                                                       &c, &store});
  if (c.post_norm) post_mlp_norm_ = norm("post_mlp_norm");
}

ResidualAdd ResidualStream::pending() const {
  if (!branch.defined()) return {};
  return {&branch, scale, &sum};
}

ResidualStream ResidualStream::materialised() const {
  if (!branch.defined()) return *this;
  Tensor out = sum;
  add_scaled_into(out, x, branch, scale);
  return out;
}

ResidualStream Block::forward(const ResidualStream& in, const SeqInfo& seq, Saved& s, Arena& saves,
                              Arena& outputs) const {
  // The input's pending add, done by the attention norm as it normalises it.
  if (!s.attn) s.attn = attn_->new_saved();
  if (!s.mlp) s.mlp = mlp_->new_saved();
  const Tensor h_attn = attn_norm_->forward(in.x, s.attn_norm, saves, in.pending());
  s.input = in.value();
  s.mid = saves.alloc(s.input.shape(), s.input.dtype());
  if (adds_in_projections_) {
    // mid = x + rs * attn(...) and out = mid + rs * mlp(...), each written by the
    // branch's output projection (the product's epilogue reads the residual): the
    // norms after them only normalise, and the output has nothing pending.
    attn_->forward(h_attn, seq, *s.attn, saves, {&s.input, residual_scale_, &s.mid});
    Tensor out = outputs.alloc(s.input.shape(), s.input.dtype());
    mlp_->forward(mlp_norm_->forward(s.mid, s.mlp_norm, saves), *s.mlp, saves, {&s.mid, residual_scale_, &out});
    return out;
  }
  Tensor a = attn_->forward(h_attn, seq, *s.attn, saves);
  if (post_attn_norm_) a = post_attn_norm_->forward(a, s.post_attn_norm, saves);
  // mid = x + rs * a, written by the MLP norm in the same pass that normalises it.
  const Tensor h = mlp_norm_->forward(s.input, s.mlp_norm, saves, {&a, residual_scale_, &s.mid});
  Tensor m = mlp_->forward(h, *s.mlp, saves);
  if (post_mlp_norm_) m = post_mlp_norm_->forward(m, s.post_mlp_norm, saves);
  return {s.mid, m, outputs.alloc(s.input.shape(), s.input.dtype()), residual_scale_};
}

Tensor Block::infer(const Tensor& x, const CachedStep& step, LayerCache& cache, Arena& arena) const {
  Saved s;  // discarded: generation has no backward
  s.mlp = mlp_->new_saved();
  Tensor a = attn_->infer(attn_norm_->forward(x, s.attn_norm, arena), step, cache, arena);
  if (post_attn_norm_) a = post_attn_norm_->forward(a, s.post_attn_norm, arena);
  Tensor mid = arena.alloc(x.shape(), x.dtype());
  Tensor m = mlp_->forward(mlp_norm_->forward(x, s.mlp_norm, arena, {&a, residual_scale_, &mid}), *s.mlp, arena);
  if (post_mlp_norm_) m = post_mlp_norm_->forward(m, s.post_mlp_norm, arena);
  add_scaled(mid, m, residual_scale_);
  return mid;
}

void Block::backward(Tensor& dx, const SeqInfo& seq, const Saved& s, Arena& arena) const {
  // MLP branch: d(branch) = rs * dx; dx += norm_backward(mlp_backward(...)), the add
  // inside the norm's backward pass.
  Tensor dm = branch_gradient(dx, arena);
  if (post_mlp_norm_) dm = post_mlp_norm_->backward(dm, s.post_mlp_norm, arena);
  mlp_norm_->backward_add(mlp_->backward(dm, *s.mlp, arena), s.mlp_norm, dx);
  Tensor da = branch_gradient(dx, arena);
  if (post_attn_norm_) da = post_attn_norm_->backward(da, s.post_attn_norm, arena);
  attn_norm_->backward_add(attn_->backward(da, seq, *s.attn, arena), s.attn_norm, dx);
}

// rs * dx. With rs = 1 it is dx itself: a branch's backward only reads its gradient,
// and dx changes only after the branch is done.
Tensor Block::branch_gradient(const Tensor& dx, Arena& arena) const {
  if (residual_scale_ == 1.0) return dx;
  Tensor scaled = arena.alloc(dx.shape(), dx.dtype());
  scale_into(scaled, dx, residual_scale_);
  return scaled;
}

}  // namespace amber
