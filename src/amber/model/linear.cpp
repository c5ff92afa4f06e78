#include "amber/model/linear.h"

#include "amber/model/fp8_linear.h"
#include "amber/ops/gemm.h"

namespace amber {
namespace {

Tensor work_or_none(const Param* p) { return p ? p->work : Tensor(); }

class ComputeDtypeRecipe final : public LinearRecipe {
 public:
  void forward(const Tensor& x, const Param& w, const Param* b, Tensor& y, const ResidualAdd& into,
               Arena&) const override {
    if (into.residual)
      linear_forward(x, w.work, work_or_none(b), *into.sum, *into.residual, into.scale);
    else
      linear_forward(x, w.work, work_or_none(b), y);
  }
  void backward(const Tensor& dy, const Tensor& x, Param& w, Param* b, Tensor& dx, Arena&) const override {
    Tensor db = b ? b->grad : Tensor();
    linear_backward(dy, x, w.work, dx, w.grad, db, w.grad_accumulates());
  }
  void glu_forward(Glu glu, const Tensor& x, const Param& w, const Param* b, Tensor& gate_up, Tensor& h,
                   Arena&) const override {
    glu_linear_forward(glu, x, w.work, work_or_none(b), gate_up, h);
  }
  void glu_backward(Glu glu, const Tensor& dy, const GluSaved& saved, const GluParams& p, Tensor& dx,
                    Arena& scratch) const override {
    Tensor no_dx;  // the input gradient comes with the GLU's backward
    backward(dy, saved.h, p.down, p.down_bias, no_dx, scratch);
    const Arena::Mark mark = scratch.mark();
    Tensor dgate_up = scratch.alloc(saved.gate_up.shape(), dy.dtype()), dh = scratch.alloc(saved.h.shape(), dy.dtype());
    glu_linear_backward_input(glu, dy, p.down.work, saved.gate_up, dgate_up, dh);
    backward(dgate_up, saved.x, p.gate_up, p.gate_up_bias, dx, scratch);
    scratch.rewind(mark);
  }
};

}  // namespace

const Registry<LinearRecipe>& linear_recipe_registry() {
  static const auto registry = [] {
    Registry<LinearRecipe> r("linear recipe");
    r.add(kComputeDtypeRecipe, [] { return std::make_unique<ComputeDtypeRecipe>(); });
    r.add(kFp8BlockRecipe, [] { return make_fp8_block_recipe(WeightGradient::fp8); });
    r.add(kFp8BlockHpWgradRecipe, [] { return make_fp8_block_recipe(WeightGradient::compute_dtype); });
    return r;
  }();
  return registry;
}

Linear::Linear(ParamStore& store, const LinearSpec& s)
    : weight_(store.add(s.name + ".weight", {s.out, s.in}, s.role, ParamInit::normal(s.init_std))),
      bias_(s.bias ? store.add(s.name + ".bias", {s.out}, ParamRole::vector, ParamInit::zeros()) : nullptr),
      recipe_(linear_recipe_registry().build(s.recipe)) {
  weight_->product_gradient = true;
}

Linear::Linear(std::shared_ptr<Param> weight, std::shared_ptr<Param> bias, const std::string& recipe)
    : weight_(std::move(weight)), bias_(std::move(bias)), recipe_(linear_recipe_registry().build(recipe)) {}

Tensor Linear::forward(const Tensor& x, Arena& arena, const ResidualAdd& into) const {
  if (into.residual) {
    Tensor unused;
    recipe_->forward(x, *weight_, bias_.get(), unused, into, arena);
    return *into.sum;
  }
  Tensor y = arena.alloc({x.size(0), out_features()}, x.dtype());
  forward_into(x, y, arena);
  return y;
}

void Linear::forward_into(const Tensor& x, Tensor& y, Arena& scratch) const {
  recipe_->forward(x, *weight_, bias_.get(), y, {}, scratch);
}

Tensor Linear::backward(const Tensor& dy, const Tensor& x, Arena& arena) const {
  Tensor dx = arena.alloc(x.shape(), dy.dtype());
  backward_into(dy, x, dx, arena);
  return dx;
}

void Linear::backward_into(const Tensor& dy, const Tensor& x, Tensor& dx, Arena& scratch) const {
  recipe_->backward(dy, x, *weight_, bias_.get(), dx, scratch);
}

GluLinear::GluLinear(ParamStore& store, const LinearSpec& spec, Glu glu) : linear_(store, spec), glu_(glu) {}

void GluLinear::forward(const Tensor& x, Tensor& gate_up, Tensor& h, Arena& scratch) const {
  linear_.recipe_->glu_forward(glu_, x, *linear_.weight_, linear_.bias_.get(), gate_up, h, scratch);
}

Tensor GluLinear::backward(const Linear& down, const Tensor& dy, const GluSaved& saved, Arena& arena) const {
  Tensor dx = arena.alloc(saved.x.shape(), dy.dtype());
  const GluParams params{*linear_.weight_, linear_.bias_.get(), *down.weight_, down.bias_.get()};
  linear_.recipe_->glu_backward(glu_, dy, saved, params, dx, arena);
  return dx;
}

}  // namespace amber
